package framework

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLiveChildren checks the leak detector that Main relies on: a running
// child is listed, and a reaped one is not.
func TestLiveChildren(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	isChild := func(line string) bool { return strings.HasPrefix(line, pid+" ") }

	children, err := LiveChildren()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(children, isChild) {
		t.Errorf("LiveChildren() = %q, want it to list pid %s", children, pid)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	children, err = LiveChildren()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(children, isChild) {
		t.Errorf("LiveChildren() = %q after the child was reaped", children)
	}
}

func TestNamespacePrefix(t *testing.T) {
	for name, want := range map[string]string{
		"TestFoo":                        "testfoo-",
		"TestFoo/sub_case#01":            "testfoo-sub-case-01-",
		"Test" + strings.Repeat("x", 80): "test" + strings.Repeat("x", 36) + "-",
	} {
		if got := namespacePrefix(name); got != want {
			t.Errorf("namespacePrefix(%q) = %q, want %q", name, got, want)
		}
	}
}
