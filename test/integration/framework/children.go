package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
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
		st, ok := readStat(stat)
		if !ok || st.ppid != self {
			continue // exited while we looked, or not ours
		}
		pid := filepath.Base(filepath.Dir(stat))
		children = append(children, fmt.Sprintf("%s %s (state %s)", pid, st.comm, st.state))
	}
	return children, nil
}

// waitStopped waits, up to timeout, until every thread of process pid is
// stopped (state T, or t under a tracer). A SIGSTOP stops the threads of a
// process one by one, as each is next scheduled: until then the others still
// run, and may answer a request sent after kill returned.
func waitStopped(ctx context.Context, pid int, timeout time.Duration) error {
	tasks := fmt.Sprintf("/proc/%d/task/*/stat", pid)
	var running []string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		stats, err := filepath.Glob(tasks)
		if err != nil {
			return false, fmt.Errorf("list %s: %w", tasks, err)
		}
		if len(stats) == 0 {
			return false, fmt.Errorf("process %d: no threads (exited?)", pid)
		}
		running = running[:0]
		for _, stat := range stats {
			if st, ok := readStat(stat); ok && st.state != "T" && st.state != "t" {
				running = append(running, fmt.Sprintf("%s %s (state %s)", filepath.Base(filepath.Dir(stat)), st.comm, st.state))
			}
		}
		return len(running) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("process %d not stopped within %s (threads still running: %v): %w", pid, timeout, running, err)
	}
	return nil
}

// stat is what is read of a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat.
type stat struct {
	comm, state string
	ppid        int
}

// readStat parses a stat file; ok is false when it is gone or malformed.
func readStat(path string) (stat, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return stat{}, false
	}
	// The command is in parentheses and may contain spaces; the fields
	// after the last ')' are state, ppid, ...
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	start := strings.IndexByte(s, '(')
	if end < 0 || start < 0 || start > end {
		return stat{}, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 2 {
		return stat{}, false
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return stat{}, false
	}
	return stat{comm: s[start+1 : end], state: fields[0], ppid: ppid}, true
}
