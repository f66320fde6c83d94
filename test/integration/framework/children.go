package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LiveChildren lists the processes whose parent is this process, as
// "pid command" strings. Zombies count: a child that was never waited for is a
// leak too.
func LiveChildren() ([]string, error) {
	self := os.Getpid()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var children []string
	for _, stat := range stats {
		data, err := os.ReadFile(stat)
		if err != nil {
			continue // the process exited while we looked
		}
		// The command is in parentheses and may contain spaces; the fields
		// after the last ')' are state, ppid, ...
		s := string(data)
		end := strings.LastIndexByte(s, ')')
		start := strings.IndexByte(s, '(')
		if end < 0 || start < 0 || start > end {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, err := strconv.Atoi(fields[1])
		if err != nil || ppid != self {
			continue
		}
		pid := filepath.Base(filepath.Dir(stat))
		children = append(children, fmt.Sprintf("%s %s (state %s)", pid, s[start+1:end], fields[0]))
	}
	return children, nil
}
