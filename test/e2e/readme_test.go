package e2e

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cle-dev/cle/test/integration/framework"
)

// The hosts the README installs from, as the release's pipeline publishes
// to them; the node test's stand-ins serve the same paths.
const (
	readmeDownloads = "https://github.com/cle-dev/cle/releases/download/"
	readmeChart     = "oci://ghcr.io/cle-dev/charts/cle"
)

// readmeCommands returns the commands of the README's sh block that the
// comment "<!-- e2e: <test's name> ..." introduces, each split into its
// words, with the hosts a user fetches the release from changed to the
// stand-ins': the downloads of the release's tag (another version fails
// the test), the chart's OCI repository (helm gets --plain-http, which
// the stand-in needs). A command that names any other URL, or that needs a
// shell (quotes, pipes, variables), fails the test.
func (n *node) readmeCommands(t *testing.T) [][]string {
	t.Helper()
	f, err := os.Open(framework.RepoPath("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds [][]string
	found, in := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- e2e: "+t.Name()+" "):
			found = true
		case found && !in && len(cmds) == 0:
			if line != "```sh" {
				t.Fatalf("README.md: the comment naming %s is not followed by a sh block", t.Name())
			}
			in = true
		case in && line == "```":
			in = false
			found = false
		case in:
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			words := strings.Fields(line)
			if len(words) == 0 || strings.HasPrefix(words[0], "#") {
				continue
			}
			if strings.ContainsAny(line, "'\"|&;$<>`\\") {
				t.Fatalf("README.md: %q needs a shell; the node test runs commands word by word", line)
			}
			cmds = append(cmds, n.standInCommand(t, words))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cmds) == 0 {
		t.Fatalf("README.md has no sh block after a comment <!-- e2e: %s ... -->", t.Name())
	}
	return cmds
}

// standInCommand changes the hosts of a README command to the stand-ins'.
func (n *node) standInCommand(t *testing.T, words []string) []string {
	t.Helper()
	downloads := readmeDownloads + n.release.tag + "/"
	var out []string
	helm := words[0] == "helm"
	for _, w := range words {
		key, value, isFlag := strings.Cut(w, "=")
		if !isFlag || !strings.HasPrefix(w, "--") {
			key, value = "", w
		}
		switch {
		case strings.HasPrefix(value, downloads):
			value = n.assetsURL + "/" + strings.TrimPrefix(value, downloads)
		case strings.HasPrefix(value, readmeDownloads):
			t.Fatalf("README.md downloads %s; the release is %s", value, n.release.tag)
		case value == readmeChart:
			value = n.chartRef
		case strings.Contains(value, "://"):
			t.Fatalf("README.md fetches %s, from a host the node test has no stand-in for", value)
		}
		if key != "" {
			value = key + "=" + value
		}
		out = append(out, value)
	}
	if helm {
		for i, w := range out {
			if w == "--version" && (i+1 == len(out) || out[i+1] != strings.TrimPrefix(n.release.tag, "v")) {
				t.Fatalf("README.md: %q installs another version than the release's chart, %s", strings.Join(words, " "), strings.TrimPrefix(n.release.tag, "v"))
			}
		}
		out = append(out, "--plain-http")
	}
	return out
}

// TestReadmeQuickstart runs the README's install commands as a user would
// on a fresh cluster, from the release as published (to the stand-ins):
// cle-controller in portable mode, the admission policies and the example
// candidates, applied from the release's downloads, their image pulled from
// the registry; then kubectl cle status, until it shows the example's
// Lease held by one of its Pods, as it should be held.
func TestReadmeQuickstart(t *testing.T) {
	n := cluster
	ctx := context.Background()
	begin := time.Now()
	// After every delete below (cleanups run last first).
	t.Cleanup(func() {
		n.waitNamespaceGone(t, exampleNamespace)
		n.waitNamespaceGone(t, cleNamespace)
	})
	var status []string
	for _, cmd := range n.readmeCommands(t) {
		switch {
		case len(cmd) >= 4 && cmd[0] == "kubectl" && cmd[1] == "apply" && cmd[2] == "-f":
			n.kubectl(t, "", cmd[1:]...)
			t.Cleanup(func() {
				n.kubectl(t, "", "delete", "-f", cmd[3], "--ignore-not-found", "--wait=true", "--timeout=3m")
			})
		case len(cmd) >= 3 && cmd[0] == "kubectl" && cmd[1] == "cle" && cmd[2] == "status":
			status = cmd
		default:
			t.Fatalf("README.md's quickstart runs %q, which the test does not know how to check", strings.Join(cmd, " "))
		}
	}
	if status == nil {
		t.Fatal("README.md's quickstart does not end with kubectl cle status")
	}

	var out string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		out = n.kubectl(t, "", status[1:]...)
		for line := range strings.Lines(out) {
			f := strings.Fields(line)
			if len(f) < 8 || f[0] != exampleLease || f[len(f)-2] != "optimal" {
				continue
			}
			holder := f[2]
			p, err := n.client.CoreV1().Pods(exampleNamespace).Get(ctx, holder, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && p.DeletionTimestamp == nil, nil
		}
		return false, nil
	})
	// How kubectl cle chose its API mode, and the native candidates that
	// may have swayed it: the node's cluster serves both kinds.
	_, choice := n.kubectlStreams(t, "", append(status[1:], "-v=1")...)
	t.Logf("%s -v=1 chose:\n%s", strings.Join(status, " "), choice)
	t.Logf("native LeaseCandidates:\n%s", n.kubectl(t, "", "get", "leasecandidates.coordination.k8s.io", "-A"))
	if err != nil {
		n.describe(t, cleNamespace)
		n.describe(t, exampleNamespace)
		t.Fatalf("%s never showed the example's Lease held by one of its Pods, as it should be: %v\n%s", strings.Join(status, " "), err, out)
	}
	t.Logf("the README's quickstart, from the published release, elected in %s:\n$ %s\n%s", time.Since(begin).Round(100*time.Millisecond), strings.Join(status, " "), out)
}

// TestReadmeHelm runs the README's Helm install as a user would: the
// namespace with its Pod Security label, then helm install of the chart from
// the registry it was published to (the stand-in). cle-controller's Pods
// become Ready and one holds the lock; helm uninstall then removes them.
func TestReadmeHelm(t *testing.T) {
	n := cluster
	helm := toolFromEnv(t, helmEnv)
	begin := time.Now()
	var release, ns string
	for _, cmd := range n.readmeCommands(t) {
		switch cmd[0] {
		case "kubectl":
			n.kubectl(t, "", cmd[1:]...)
			if len(cmd) >= 4 && cmd[1] == "create" && cmd[2] == "namespace" {
				name := cmd[3]
				t.Cleanup(func() {
					n.kubectl(t, "", "delete", "namespace", name, "--ignore-not-found", "--wait=true", "--timeout=3m")
				})
			}
		case "helm":
			n.helm(t, helm, cmd[1:]...)
			if len(cmd) < 3 || cmd[1] != "install" {
				t.Fatalf("README.md runs %q; the test knows how to undo helm install only", strings.Join(cmd, " "))
			}
			release = cmd[2]
			for i, w := range cmd {
				if w == "--namespace" && i+1 < len(cmd) {
					ns = cmd[i+1]
				}
			}
			n.uninstallWhenDone(t, helm, release, ns)
		default:
			t.Fatalf("README.md's Helm install runs %q, which the test does not know how to undo", strings.Join(cmd, " "))
		}
	}
	if release == "" || ns == "" {
		t.Fatal("README.md's Helm install has no helm install --namespace")
	}
	pods := n.waitDeploymentReady(t, ns, cleDeployment)
	n.wantReleaseImage(t, pods)
	holder := n.waitLockHeldBy(t, pods)
	t.Logf("the README's helm install of %s: %d Pods Ready, %s acting, in %s", n.chartRef, len(pods), holder, time.Since(begin).Round(100*time.Millisecond))
}
