// Package kubectlcle tests the kubectl-cle plugin against a real
// kube-apiserver in both API modes: its commands run in this process, as
// kubectl would run them, with a kubeconfig of the test server, as the
// admin or as a user who may only read; and the built binary, on its own
// and through kubectl.
package kubectlcle

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/cmd/kubectl-cle/app"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/kubectlcle"
	"github.com/cle-dev/cle/pkg/strategy"
	"github.com/cle-dev/cle/test/integration/framework"
)

// apiMode is one API mode and a server to run it on.
type apiMode struct {
	name   string
	server *framework.Server
}

var modes []apiMode

func TestMain(m *testing.M) {
	users := []framework.User{{Name: viewerUser}, {Name: nsViewerUser}}
	framework.MainServers(m, []framework.Options{
		{CoordinatedLeaderElection: true, IdleBuiltinController: true, Users: users},
		{PortableCRD: true, Users: users},
	}, func(s []*framework.Server) {
		modes = []apiMode{{string(access.ModeNative), s[0]}, {string(access.ModePortable), s[1]}}
	})
}

func forEachMode(t *testing.T, f func(t *testing.T, m apiMode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// kubeconfig writes an admin kubeconfig of the mode's server.
func kubeconfig(t *testing.T, m apiMode) string {
	t.Helper()
	return kubeconfigOf(t, m, framework.AdminUser)
}

// kubeconfigOf writes a kubeconfig of the mode's server for user.
func kubeconfigOf(t *testing.T, m apiMode, user string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := m.server.WriteUserKubeconfig(path, user); err != nil {
		t.Fatal(err)
	}
	return path
}

// controllerLine matches the line above status's table in each mode: the
// framework idles the election controller built into kube-apiserver by
// holding its lock for cle (marked as cle's holder), which reads as cle
// acting; in portable mode nothing holds cle-controller's lock (the
// controllers of these tests run without leader election).
func controllerLine(m apiMode) *regexp.Regexp {
	if m.name == string(access.ModeNative) {
		return regexp.MustCompile(`^Election controller: cle \(holder ` + framework.IdlerIdentity + `\), acting for \S+ \(kube-system/leader-election-controller\)$`)
	}
	return regexp.MustCompile(`^Election controller: none acting \(no Lease kube-system/cle-controller\)$`)
}

// table checks the election controller line of a status table and returns
// the table, its ages masked.
func table(t *testing.T, m apiMode, out string) string {
	t.Helper()
	first, rest, _ := strings.Cut(out, "\n")
	if !controllerLine(m).MatchString(first) {
		t.Errorf("status: first line %q does not match %s", first, controllerLine(m))
	}
	return maskAges(rest)
}

// plugin runs kubectl-cle with args against the mode's server, in ns, the
// API mode chosen automatically.
func plugin(ctx context.Context, t *testing.T, kc, ns string, out *framework.SyncBuffer, args ...string) (stderr string, code int) {
	t.Helper()
	var errOut framework.SyncBuffer
	full := append([]string{"--kubeconfig", kc, "-n", ns}, args...)
	code = app.Main(ctx, full, genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: &errOut})
	return errOut.String(), code
}

// run runs a command to completion and returns its output.
func run(t *testing.T, kc, ns string, args ...string) string {
	t.Helper()
	var out framework.SyncBuffer
	if stderr, code := plugin(context.Background(), t, kc, ns, &out, args...); code != 0 {
		t.Fatalf("kubectl cle %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return out.String()
}

// lastAge matches an age kubectl-cle prints in the last column.
var lastAge = regexp.MustCompile(`(?m)(\s)\d+[smhdy](\d+[smh])?$`)

// maskAges replaces the ages of the last column, which depend on timing.
func maskAges(s string) string { return lastAge.ReplaceAllString(s, "${1}<age>") }

// statusOf runs status -o json and returns the rows.
func statusOf(t *testing.T, kc, ns string, args ...string) []kubectlcle.LeaseStatus {
	t.Helper()
	var list struct {
		Items []kubectlcle.LeaseStatus `json:"items"`
	}
	out := run(t, kc, ns, append([]string{"status", "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	return list.Items
}

// startCandidate runs a candidate of the library until the test ends.
func startCandidate(t *testing.T, m apiMode, ns, lease, id, binary, emulation string) {
	t.Helper()
	framework.RunCandidate(t, candidate.Config{
		RestConfig: m.server.Config(), APIMode: m.name, Namespace: ns, LeaseName: lease, Identity: id,
		BinaryVersion: binary, EmulationVersion: emulation,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	})
}

func poll(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, state := cond()
		last = state
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s; last:\n%s", what, timeout, last)
	}
}

// TestElection follows a real election under cle-controller with all three
// commands: a first candidate is elected, an older one joins and the Lease
// moves to it through preferredHolder.
func TestElection(t *testing.T) {
	forEachMode(t, func(t *testing.T, m apiMode) {
		ns := m.server.CreateNamespace(t)
		m.server.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}, APIMode: m.name})
		kc := kubeconfig(t, m)

		var watchOut framework.SyncBuffer
		watchCtx, stopWatch := context.WithCancel(context.Background())
		watchDone := make(chan int)
		go func() {
			_, code := plugin(watchCtx, t, kc, ns, &watchOut, "watch", "example")
			watchDone <- code
		}()
		t.Cleanup(func() { stopWatch(); <-watchDone })
		// A watch on a named Lease says so when neither it nor a candidate
		// exists yet: from then on it sees every change.
		poll(t, "watch in place", 30*time.Second, func() (bool, string) {
			out := watchOut.String()
			return strings.Contains(out, "no Lease and no LeaseCandidates yet"), out
		})

		startCandidate(t, m, ns, "example", "newer", "1.36.0", "1.36.0")
		poll(t, "newer optimal", 30*time.Second, func() (bool, string) {
			rows := statusOf(t, kc, ns)
			// The holder's first renewal makes the term 1.
			return len(rows) == 1 && rows[0].Holder == "newer" && rows[0].Term == 1 && rows[0].State == kubectlcle.StateOptimal, run(t, kc, ns, "status", "-o", "wide")
		})
		rows := statusOf(t, kc, ns)
		if r := rows[0]; string(r.APIMode) != m.name || r.Name != "example" || r.Strategy != string(coordinationv1.OldestEmulationVersion) || r.Best != "newer" || r.Candidates != 1 {
			t.Errorf("status: %+v", r)
		}
		got := table(t, m, run(t, kc, ns, "status"))
		want := "LEASE     STRATEGY                 HOLDER   PREFERRED   BEST    CANDIDATES   TERM   STATE     AGE\n" +
			"example   OldestEmulationVersion   newer    <none>      newer   1            1      optimal   <age>\n"
		if got != want {
			t.Errorf("status:\n%s\nwant:\n%s", got, want)
		}

		startCandidate(t, m, ns, "example", "old", "1.36.0", "1.35.0")
		poll(t, "old optimal", 30*time.Second, func() (bool, string) {
			rows := statusOf(t, kc, ns, "example")
			return len(rows) == 1 && rows[0].Holder == "old" && rows[0].State == kubectlcle.StateOptimal && rows[0].Candidates == 2, run(t, kc, ns, "describe", "example")
		})

		desc := run(t, kc, ns, "describe", "example")
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^API mode:\s+` + m.name + `$`),
			regexp.MustCompile(`(?m)^State:\s+optimal$`),
			regexp.MustCompile(`(?m)^Holder:\s+old \(term [1-9]\d*, renewed \S+ ago\)$`),
			regexp.MustCompile(`(?m)^Why:\s+old \(emulation 1\.35\.0, binary 1\.36\.0\) holds the Lease and is the best of its 2 candidates under OldestEmulationVersion\.$`),
			regexp.MustCompile(`(?m)^\s+1\s+old\s+1\.35\.0\s+1\.36\.0\s+OldestEmulationVersion\s+\S+\s+\S+\s+holder,best$`),
			regexp.MustCompile(`(?m)^\s+2\s+newer\s+1\.36\.0\s+1\.36\.0\s+OldestEmulationVersion\s+\S+\s+\S+\s+<none>$`),
			regexp.MustCompile(`(?m)^\s+\S+\s+Normal\s+LeaderElected\s+cle-controller\s+Elected newer`),
			regexp.MustCompile(`(?m)^\s+\S+\s+Normal\s+PreferredHolderSet\s+cle-controller\s+old is better than holder newer`),
		} {
			if !want.MatchString(desc) {
				t.Errorf("describe does not match %s:\n%s", want, desc)
			}
		}
		var d kubectlcle.LeaseDescription
		if err := json.Unmarshal([]byte(run(t, kc, ns, "describe", "example", "-o", "json")), &d); err != nil {
			t.Fatal(err)
		}
		if len(d.Candidates) != 2 || d.Candidates[0].Name != "old" || d.Candidates[0].Rank != 1 || d.Candidates[1].Name != "newer" {
			t.Errorf("describe -o json candidates: %+v", d.Candidates)
		}

		// The watch saw the whole story, in order.
		poll(t, "watch lines", 10*time.Second, func() (bool, string) {
			out := watchOut.String()
			return strings.Contains(out, "preferredHolder old -> <none>"), out
		})
		stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S+  ` + regexp.QuoteMeta(ns+"/example") + `  `
		var pattern []string
		for _, line := range []string{
			`no Lease and no LeaseCandidates yet  \[unmanaged, best <none>\]`,
			`candidates \+newer\(emulation 1\.36\.0, binary 1\.36\.0, OldestEmulationVersion\)  \[vacant, best newer\]`,
			`holder <none> -> newer \(term 1\)  \[optimal, best newer\]`,
			`candidates \+old\(emulation 1\.35\.0, binary 1\.36\.0, OldestEmulationVersion\)  \[preempting, best old\]`,
			`preferredHolder <none> -> old  \[preempting, best old\]`,
			`holder newer -> old \(term [1-9]\d*\)  \[optimal, best old\]`,
			`preferredHolder old -> <none>  \[optimal, best old\]`,
		} {
			pattern = append(pattern, stamp+line)
		}
		if re := regexp.MustCompile(`(?s)` + strings.Join(pattern, `\n(?:.*\n)*?`)); !re.MatchString(watchOut.String()) {
			t.Errorf("watch output does not tell the election in order:\n%s\nwant lines matching:\n%s", watchOut.String(), strings.Join(pattern, "\n"))
		}
	})
}

// TestStates checks the states that need no controller: a conflict, an
// expired Lease, a Lease held outside coordinated election and one no
// candidate names, in golden output.
func TestStates(t *testing.T) {
	forEachMode(t, func(t *testing.T, m apiMode) {
		ns := m.server.CreateNamespace(t)
		kc := kubeconfig(t, m)
		clients, err := access.NewClients(m.server.Config())
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		acc, err := access.Detect(ctx, clients, m.name)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		lease := func(name, holder string, renewed time.Time, seconds, term int32, strat coordinationv1.CoordinatedLeaseStrategy) {
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To(holder), RenewTime: ptr.To(metav1.NewMicroTime(renewed)),
					LeaseDurationSeconds: ptr.To(seconds), LeaseTransitions: ptr.To(term),
				},
			}
			if strat != "" {
				l.Spec.Strategy = ptr.To(strat)
			}
			if _, err := acc.Leases(ns).Create(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		cand := func(name, leaseName string, strat coordinationv1.CoordinatedLeaseStrategy) {
			if _, err := acc.LeaseCandidates(ns).Create(ctx, &coordinationv1beta1.LeaseCandidate{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: coordinationv1beta1.LeaseCandidateSpec{
					LeaseName: leaseName, BinaryVersion: "1.36.0", EmulationVersion: "1.36.0", Strategy: strat,
					RenewTime: ptr.To(metav1.NewMicroTime(now)),
				},
			}); err != nil {
				t.Fatal(err)
			}
		}
		lease("plain", "someone", now, 3600, 0, "")
		lease("expired", "gone", now.Add(-time.Hour), 15, 4, coordinationv1.OldestEmulationVersion)
		cand("gone", "expired", coordinationv1.OldestEmulationVersion)
		lease("outsider", "outsider", now, 3600, 2, "")
		cand("hopeful", "outsider", coordinationv1.OldestEmulationVersion)
		cand("c1", "split", coordinationv1.OldestEmulationVersion)
		cand("c2", "split", strategy.PriorityName)

		got := table(t, m, run(t, kc, ns, "status"))
		want := "" +
			"LEASE      STRATEGY                 HOLDER     PREFERRED   BEST      CANDIDATES   TERM   STATE       AGE\n" +
			"expired    OldestEmulationVersion   gone       <none>      gone      1            4      expired     <age>\n" +
			"outsider   OldestEmulationVersion   outsider   <none>      hopeful   1            2      unmanaged   <age>\n" +
			"split      <none>                   <none>     <none>      <none>    2            0      conflict    <none>\n"
		if got != want {
			t.Errorf("status:\n%s\nwant:\n%s", got, want)
		}
		got = table(t, m, run(t, kc, ns, "status", "plain"))
		want = "" +
			"LEASE   STRATEGY   HOLDER    PREFERRED   BEST     CANDIDATES   TERM   STATE       AGE\n" +
			"plain   <none>     someone   <none>      <none>   0            0      unmanaged   <age>\n"
		if got != want {
			t.Errorf("status plain:\n%s\nwant:\n%s", got, want)
		}
		if got := run(t, kc, ns, "describe", "split"); !strings.Contains(got, `The candidates at binary version 1.36.0 ask for different strategies (c1: "OldestEmulationVersion", c2: "cle.dev/Priority"), so nobody is elected until they agree.`) {
			t.Errorf("describe split:\n%s", got)
		}
		if got := run(t, kc, ns, "describe", "expired"); !regexp.MustCompile(`Why:\s+Holder gone stopped renewing the Lease \(expired \S+ ago\): the controller names gone`).MatchString(got) {
			t.Errorf("describe expired:\n%s", got)
		}
		var out framework.SyncBuffer
		if stderr, code := plugin(ctx, t, kc, ns, &out, "status", "missing"); code == 0 || !strings.Contains(stderr, `leases.coordination.k8s.io "missing" not found`) {
			t.Errorf("status of a missing Lease: exit %d, stderr %q", code, stderr)
		}
		// -A lists this namespace's Leases among all others.
		found := false
		for _, r := range statusOf(t, kc, ns, "-A") {
			found = found || (r.Namespace == ns && r.Name == "split" && r.State == kubectlcle.StateConflict)
		}
		if !found {
			t.Errorf("status -A does not list %s/split", ns)
		}
	})
}

// TestKubectlPlugin runs the built plugin through kubectl itself, as users
// do: kubectl finds kubectl-cle on PATH.
func TestKubectlPlugin(t *testing.T) {
	m := modes[0]
	kubectl, err := framework.Binary("kubectl")
	if err != nil {
		t.Fatalf("%v (hack/kube-bin.sh kubectl builds it)", err)
	}
	bin := filepath.Dir(pluginBinary(t))
	ns := m.server.CreateNamespace(t)
	kc := kubeconfig(t, m)
	clients, err := access.NewClients(m.server.Config())
	if err != nil {
		t.Fatal(err)
	}
	acc := access.NewNative(clients.Kube)
	if _, err := acc.LeaseCandidates(ns).Create(context.Background(), &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: "solo"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: "app", BinaryVersion: "1.36.0", EmulationVersion: "1.36.0",
			Strategy: coordinationv1.OldestEmulationVersion, RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
	}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kubectl, "cle", "status", "--kubeconfig", kc, "-n", ns)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl cle status: %v\n%s", err, stderr.String())
	}
	want := "" +
		"LEASE   STRATEGY                 HOLDER   PREFERRED   BEST   CANDIDATES   TERM   STATE    AGE\n" +
		"app     OldestEmulationVersion   <none>   <none>      solo   1            0      vacant   <none>\n"
	if got := table(t, m, stdout.String()); got != want {
		t.Errorf("kubectl cle status:\n%s\nwant:\n%s", stdout.String(), want)
	}
}
