package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// krewEnv names the krew binary (hack/krew.sh), built before the node's
// network namespace cuts the module proxy off.
const krewEnv = "CLE_KREW"

// The election the plugin test shows: one candidate, no Lease yet.
const (
	krewNamespace = "cle-krew"
	krewLease     = "app"
	krewCandidate = "solo"
)

// TestKrewPlugin installs kubectl cle as a user does, with the README's
// krew command: the manifest from the release's downloads (the stand-in's),
// and the linux archive from the URL it names (krew checks the archive's
// sha256 against the manifest); then runs it through kubectl, which finds it on
// PATH in krew's bin directory: its version, the elections of the node,
// and, once the completion helper is on PATH as the manifest's caveats
// say, kubectl's own completion of kubectl cle's subcommands, namespaces,
// contexts and Leases. Then krew uninstalls it.
func TestKrewPlugin(t *testing.T) {
	n := cluster
	ctx := context.Background()
	krew := toolFromEnv(t, krewEnv)
	manifest := n.release.bundle(filepath.Join("plugins", "cle.yaml"))

	// krew's home as a user's is once krew is set up: its bin directory on
	// PATH, and the default index, a clone of krew-index, which krew install
	// updates first. The stand-in of krew-index is a git repository of the
	// test's holding the release's manifest alone, as krew-index does once
	// the release is submitted (krew list, info and uninstall read it).
	// krew itself is the plugin kubectl-krew, on PATH from a directory of
	// its own: in krew's bin without a receipt, it would take the home for
	// one of a krew too old to use.
	u := &krewUser{n: n, root: t.TempDir(), tools: t.TempDir()}
	bin := filepath.Join(u.root, "bin")
	if err := os.Symlink(krew, filepath.Join(u.tools, "kubectl-krew")); err != nil {
		t.Fatal(err)
	}
	upstream := filepath.Join(t.TempDir(), "krew-index")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(upstream, "plugins", "cle.yaml"), string(data)); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(u.root, "index", "default")
	for _, args := range [][]string{
		{"-C", upstream, "init", "--quiet"},
		{"-C", upstream, "add", "plugins"},
		{"-C", upstream, "-c", "user.name=e2e", "-c", "user.email=e2e@cle.invalid", "commit", "--quiet", "-m", "cle " + n.release.tag},
		{"clone", "--quiet", upstream, index},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}

	// The README's command, from the release's downloads (the stand-in's):
	// krew reads the manifest there and downloads this platform's archive
	// from the URL the manifest gives.
	cmds := n.readmeCommands(t)
	if len(cmds) != 1 || len(cmds[0]) < 3 || cmds[0][0] != "kubectl" || cmds[0][1] != "krew" || cmds[0][2] != "install" {
		t.Fatalf("README.md's krew install is %q, want one kubectl krew install", cmds)
	}
	begin := time.Now()
	out := u.kubectl(t, cmds[0][1:]...)
	t.Logf("%s in %s:\n%s", strings.Join(cmds[0], " "), time.Since(begin).Round(100*time.Millisecond), out)
	store := filepath.Join(u.root, "store", "cle", n.release.tag)
	helper := filepath.Join(store, "kubectl_complete-cle")
	if caveat := "/store/cle/" + n.release.tag + "/kubectl_complete-cle"; !strings.Contains(out, "Installed plugin: cle") || !strings.Contains(out, caveat) {
		t.Errorf("krew install did not report cle installed with the caveats naming ...%s", caveat)
	}
	// krew links the binary from the store of this version, which holds
	// every file the manifest names.
	if target, err := os.Readlink(filepath.Join(bin, "kubectl-cle")); err != nil || target != filepath.Join(store, "kubectl-cle") {
		t.Errorf("%s/kubectl-cle links to %q (%v), want %s", bin, target, err, filepath.Join(store, "kubectl-cle"))
	}
	entries, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	if want := []string{"LICENSE", "kubectl-cle", "kubectl_complete-cle"}; !slices.Equal(files, want) {
		t.Errorf("krew installed %q in %s, want %q", files, store, want)
	}
	// Not on a terminal, krew list prints the names alone, detached/ for
	// a plugin installed from a manifest; its receipt has the version.
	// krew info reads the index's manifest: the archive for this platform
	// is the one installed.
	if list := u.kubectl(t, "krew", "list"); !slices.Contains(strings.Fields(list), "detached/cle") {
		t.Errorf("kubectl krew list does not list detached/cle:\n%s", list)
	}
	sum, err := fileSHA256(n.release.plugin)
	if err != nil {
		t.Fatal(err)
	}
	info := u.kubectl(t, "krew", "info", "cle")
	for _, want := range []string{"\nVERSION: " + n.release.tag + "\n", "\nSHA256: " + sum + "\n", "/" + filepath.Base(n.release.plugin) + "\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("kubectl krew info cle does not say %q:\n%s", strings.TrimSpace(want), info)
		}
	}
	receipt, err := os.ReadFile(filepath.Join(u.root, "receipts", "cle.yaml"))
	if err != nil || !strings.Contains(string(receipt), "\n  version: "+n.release.tag+"\n") {
		t.Errorf("krew's receipt of cle (%v) does not record version %s:\n%s", err, n.release.tag, receipt)
	}

	// kubectl runs the release's kubectl-cle from krew's bin directory.
	var version struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(u.kubectl(t, "cle", "version", "-o", "json")), &version); err != nil || version.Version != n.release.tag {
		t.Errorf("kubectl cle version: %+v (%v), want %s", version, err, n.release.tag)
	}
	if out := u.kubectl(t, "cle", "version"); !strings.HasPrefix(out, "kubectl-cle "+n.release.tag) {
		t.Errorf("kubectl cle version: %q", out)
	}

	// An election to show, the same whether an election controller acts
	// now or not (kube-apiserver's takes its Lease back once the static Pod
	// test is over): a Lease its one candidate holds.
	if _, err := n.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: krewNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.client.CoreV1().Namespaces().Delete(context.Background(), krewNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		n.waitNamespaceGone(t, krewNamespace)
	})
	now := metav1.NewMicroTime(time.Now())
	if _, err := n.client.CoordinationV1().Leases(krewNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: krewLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(krewCandidate), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now,
			LeaseTransitions: ptr.To[int32](3), Strategy: ptr.To(coordinationv1.OldestEmulationVersion),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CoordinationV1beta1().LeaseCandidates(krewNamespace).Create(ctx, &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: krewCandidate},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: krewLease, BinaryVersion: "1.36.0", EmulationVersion: "1.36.0",
			Strategy: coordinationv1.OldestEmulationVersion, RenewTime: &now,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	status := u.kubectl(t, "cle", "status", "-A")
	t.Logf("kubectl cle status -A:\n%s", status)
	lines := strings.Split(strings.TrimRight(status, "\n"), "\n")
	if len(lines) > 1 && strings.HasPrefix(lines[1], "Election controller of cle.dev strategies: ") {
		// Native mode, where cle-controller's own lock exists.
		lines = append(lines[:1], lines[2:]...)
	}
	if !strings.HasPrefix(lines[0], "Election controller: ") || len(lines) < 3 ||
		!slices.Equal(strings.Fields(lines[1]), []string{"NAMESPACE", "LEASE", "STRATEGY", "HOLDER", "PREFERRED", "BEST", "CANDIDATES", "TERM", "STATE", "AGE"}) {
		t.Errorf("kubectl cle status -A: want the election controller line, then the table with NAMESPACE")
	}
	// All but the AGE column.
	want := []string{krewNamespace, krewLease, "OldestEmulationVersion", krewCandidate, "<none>", krewCandidate, "1", "3", "optimal"}
	if !slices.ContainsFunc(lines, func(l string) bool {
		f := strings.Fields(l)
		return len(f) == len(want)+1 && slices.Equal(f[:len(want)], want)
	}) {
		t.Errorf("kubectl cle status -A has no line %q", strings.Join(want, " ")+" <age>")
	}

	// Completion through kubectl, with the helper where the caveats put it.
	helperData, err := os.ReadFile(helper)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "kubectl_complete-cle"), helperData, 0o755); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(n.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var contexts []string
	for name := range kc.Contexts {
		contexts = append(contexts, name)
	}
	sort.Strings(contexts)
	for _, tc := range []struct {
		args []string // after kubectl __complete cle
		want []string
	}{
		{args: []string{"st"}, want: []string{"status"}},
		{args: []string{"status", "-n", "cle-k"}, want: []string{krewNamespace}},
		{args: []string{"describe", "--context", ""}, want: contexts},
		{args: []string{"describe", "-n", krewNamespace, ""}, want: []string{krewLease}},
		{args: []string{"status", "--namespace=" + krewNamespace, "a"}, want: []string{krewLease}},
	} {
		got := completions(u.kubectl(t, append([]string{"__complete", "cle"}, tc.args...)...))
		if !slices.Equal(got, tc.want) {
			t.Errorf("kubectl __complete cle %q: %q, want %q", tc.args, got, tc.want)
		}
	}

	u.kubectl(t, "krew", "uninstall", "cle")
	if _, err := os.Lstat(filepath.Join(bin, "kubectl-cle")); !os.IsNotExist(err) {
		t.Errorf("after kubectl krew uninstall cle, %s/kubectl-cle: %v", bin, err)
	}
	if _, err := os.Stat(filepath.Join(u.root, "store", "cle")); !os.IsNotExist(err) {
		t.Errorf("after kubectl krew uninstall cle, its store: %v", err)
	}
}

// completions are the candidates of a __complete answer, without the
// directive line and the descriptions.
func completions(out string) []string {
	var got []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.HasPrefix(l, ":") || l == "" {
			continue
		}
		name, _, _ := strings.Cut(l, "\t")
		got = append(got, name)
	}
	return got
}

// krewUser runs kubectl as a user who set krew up in root: krew's bin
// directory and krew on PATH (and not the node test's own copy of
// kubectl-cle).
type krewUser struct {
	n     *node
	root  string // KREW_ROOT
	tools string // kubectl-krew
}

func (u *krewUser) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(u.n.binDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+u.n.kubeconfig, "KREW_ROOT="+u.root, "KREW_NO_UPGRADE_CHECK=1",
		"PATH="+strings.Join([]string{filepath.Join(u.root, "bin"), u.tools, os.Getenv("PATH")}, string(os.PathListSeparator)))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if args[0] == "krew" {
		// krew reports on stderr.
		return stdout.String() + stderr.String()
	}
	return stdout.String()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
