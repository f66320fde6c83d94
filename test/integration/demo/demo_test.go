// Package demo runs the README's main command, make run (hack/local-up), end to
// end in its non-interactive mode, and checks what it shows and what it leaves
// behind.
package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRollingUpgradeDemo(t *testing.T) {
	bin := buildDemo(t)
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"native", nil},
		{"portable", []string{"--native=false"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var out, errOut bytes.Buffer
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "local-up"), append([]string{
				"--bin-dir=" + bin, "--exit-after-demo", "--step-pause=0",
				"--kubeconfig-out=" + filepath.Join(dir, "kubeconfig"), "--log-dir=" + filepath.Join(dir, "logs"),
			}, mode.args...)...)
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			transcript := out.String()
			if err != nil {
				t.Fatalf("local-up: %v\nstdout:\n%s\nstderr:\n%s", err, transcript, errOut.String())
			}
			checkTranscript(t, transcript)
			if left := processesMentioning(t, bin, "cle-integration-"+strconv.Itoa(cmd.Process.Pid)+"-"); len(left) > 0 {
				t.Errorf("left running after local-up exited: %v", left)
			}
			if t.Failed() {
				t.Logf("transcript:\n%s", transcript)
			}
		})
	}
}

// checkTranscript checks what a person watching sees: the first election, each
// upgrade step with the leader on an old replica while one is left, the watch's
// holder changes, kubectl cle status after each step, and the end.
func checkTranscript(t *testing.T, transcript string) {
	t.Helper()
	checkSays(t, transcript,
		"Starting 3 replicas of an example component at version 1.35.0",
		"Step 1/3: stopping replica-a (1.35.0, the leader)")
	// The watch is in place before the first replica starts (it reports the
	// Lease absent), and then shows every holder the Lease had, in order: the
	// old replicas, then an upgraded one.
	w, r := strings.Index(transcript, "[watch] "), strings.Index(transcript, "[replica-a] ")
	if w < 0 || r < w || !strings.Contains(strings.SplitN(transcript[w:], "\n", 2)[0], "no Lease and no LeaseCandidates yet") {
		t.Errorf("the watch's first line, before replica-a's, does not report the Lease absent")
	}
	holders := regexp.MustCompile(`\[watch\] .* holder (?:\S+ -> )?(\S+) \(term`).FindAllStringSubmatch(transcript, -1)
	var named []string
	for _, m := range holders {
		if m[1] != "<none>" {
			named = append(named, m[1])
		}
	}
	// replica-a leads first: the first election waits for every candidate
	// and breaks the tie by creation. Once the Lease has had a holder, a
	// vacancy goes to the first of the equal candidates known to be alive,
	// without waiting for a stale one that would win only the tie-break
	// (pkg/controller, judge): replica-b and replica-c may lead in either
	// order, and so may the upgraded replicas after them.
	if len(named) != 4 || named[0] != "replica-a" ||
		!slices.Equal(slices.Sorted(slices.Values(named[1:3])), []string{"replica-b", "replica-c"}) ||
		!regexp.MustCompile(`^replica-[abc]-v1-36$`).MatchString(named[3]) {
		t.Errorf("the watch showed the holders %q, want replica-a, replica-b and replica-c (the last two in either order), then a replica at 1.36.0", named)
	} else {
		checkSays(t, transcript,
			"Step 3/3: starting "+named[2]+"-v1-36 at 1.36.0",
			"Upgrade done: "+named[3]+" leads at 1.36.0")
	}
	if n := strings.Count(transcript, "$ kubectl cle status"); n != 4 {
		t.Errorf("kubectl cle status shown %d times, want 4 (after the election and each step)", n)
	}
	if n := len(regexp.MustCompile(`(?m)^example +OldestEmulationVersion +\S+ +<none> +\S+ +3 +\d+ +optimal`).FindAllString(transcript, -1)); n != 4 {
		t.Errorf("%d status tables show the Lease optimal with 3 candidates, want 4", n)
	}
}

// checkSays checks that the transcript says each of wants.
func checkSays(t *testing.T, transcript string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(transcript, want) {
			t.Errorf("the transcript does not say %q", want)
		}
	}
}

// processesMentioning lists the processes whose command line mentions any of
// needles.
func processesMentioning(t *testing.T, needles ...string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, path := range cmdlines {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(data), "\x00", " ")
		for _, n := range needles {
			if strings.Contains(line, n) {
				found = append(found, filepath.Base(filepath.Dir(path))+" "+line)
				break
			}
		}
	}
	return found
}
