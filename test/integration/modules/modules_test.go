// Package modules proves that the released Go modules can be fetched and
// used as a component outside this repository would: it writes both modules
// in the layout of a module proxy with the writer make release uses
// (hack/tools/modproxy), and builds two consumers in modules of their own in
// a temporary directory, with go get from that proxy and no replace
// directive: a kubebuilder-style controller-runtime manager adopting cle
// through contrib/controller-runtime, and a client-go LeaderElector on
// pkg/lock (testdata/). Each is then run against a real kube-apiserver with
// cle's election controller, and must be elected. Tidied, each consumer's
// go.mod and go.sum must list nothing that the same consumer without cle
// does not, but cle's modules and the Prometheus client (checkModuleGraph).
package modules

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{CoordinatedLeaderElection: true, IdleBuiltinController: true},
		func(s *framework.Server) { server = s })
}

const (
	rootModule    = "github.com/cle-dev/cle"
	contribModule = "github.com/cle-dev/cle/contrib/controller-runtime"
	// managerLease is the LeaderElectionID of testdata/manager, the
	// scaffold's.
	managerLease = "0123abcd.example.com"
)

func TestFetchedModules(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(data))

	begin := time.Now()
	proxy := t.TempDir()
	// Run as make release runs it, and built as make test built its tests.
	writer := framework.GoCommand("run", ".", "--version="+version, "--out="+proxy, root, filepath.Join(root, "contrib", "controller-runtime"))
	writer.Dir = filepath.Join(root, "hack", "tools", "modproxy")
	writer.Env = append(writer.Env, "GOWORK=off")
	if out, err := writer.CombinedOutput(); err != nil {
		t.Fatalf("write the proxy layout: %v\n%s", err, out)
	} else {
		t.Logf("proxy layout written in %s:\n%s", time.Since(begin).Round(time.Millisecond), out)
	}

	env := consumerEnv(t, proxy)
	forgetModules(t, env)
	t.Cleanup(func() { forgetModules(t, env) })
	ns := server.CreateNamespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The consumers are elected by the cle-controller binary, under a lock
	// of its own in the test's namespace (the framework idles the one
	// kube-apiserver's built-in controller holds).
	ctrl := framework.BuildCommand(t, rootModule+"/cmd/cle-controller")
	framework.StartChild(t, "cle-controller", ctrl, "--kubeconfig="+kubeconfig, "--api-mode=native",
		"--namespaces="+ns, "--leader-elect-resource-namespace="+ns, "--leader-elect-resource-name=cle-controller",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "-v=2")

	t.Run("controller-runtime", func(t *testing.T) {
		bin := buildConsumer(t, env, root, "manager", contribModule+"@"+version)
		checkBuiltFrom(t, bin, map[string]string{rootModule: version, contribModule: version})
		checkModuleGraph(t, env, root, filepath.Dir(bin))
		mgr := framework.StartChild(t, "manager", bin, "--kubeconfig="+kubeconfig, "--leader-elect",
			"--leader-election-namespace="+ns, "--health-probe-bind-address=0", "--metrics-bind-address=0")
		waitOutput(t, mgr, "leading")
		// The scaffold names no identity: the manager's candidate is the
		// only LeaseCandidate of its Lease, and the Lease must name it.
		id := onlyCandidate(t, ns, managerLease)
		waitHolder(t, ns, managerLease, id)
		t.Logf("the manager %s leads", id)
	})

	t.Run("client-go", func(t *testing.T) {
		bin := buildConsumer(t, env, root, "elector", rootModule+"@"+version)
		checkBuiltFrom(t, bin, map[string]string{rootModule: version})
		checkModuleGraph(t, env, root, filepath.Dir(bin))
		const id = "fetched-elector"
		elector := framework.StartChild(t, "elector", bin, "--kubeconfig="+kubeconfig, "--namespace="+ns,
			"--lease=fetched-elector", "--identity="+id)
		waitOutput(t, elector, "started-leading identity="+id)
		waitHolder(t, ns, "fetched-elector", id)
	})
}

// consumerEnv is the environment of a consumer's go commands. Modules come
// first from the layout in proxy, then from this machine's module cache (in
// proxy layout under cache/download), then from wherever go env GOPROXY says.
// They are extracted into this machine's module cache, and built static with
// the flags of every other static build here (framework.GoFlags, with
// CGO_ENABLED=0), so that the Kubernetes libraries and controller-runtime
// compiled for make verify's go vet and the tests' programs serve the
// consumers too, instead of each being compiled once more; the
// versions of this repository written here are taken out of that cache
// before and after (forgetModules), so that no run finds a stale copy of the
// same version. The checksum database is skipped for this repository's
// modules only: it has not seen the versions written here. GOENV=off keeps a
// go env file from adding GOPRIVATE or GONOPROXY, which would bypass the
// layout.
func consumerEnv(t *testing.T, proxy string) []string {
	t.Helper()
	vars := []string{"GOMODCACHE", "GOPROXY", "GOSUMDB", "GOCACHE"}
	out, err := exec.Command("go", append([]string{"env"}, vars...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	values := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(values) != len(vars) {
		t.Fatalf("go env %s printed %q", strings.Join(vars, " "), out)
	}
	goEnv := map[string]string{}
	for i, v := range vars {
		goEnv[v] = values[i]
	}
	goproxy := "file://" + proxy + ",file://" + filepath.Join(goEnv["GOMODCACHE"], "cache", "download")
	if goEnv["GOPROXY"] != "" {
		goproxy += "," + goEnv["GOPROXY"]
	}
	return append(os.Environ(),
		"GOENV=off",
		"GOPROXY="+goproxy,
		"GOSUMDB="+goEnv["GOSUMDB"],
		"GOCACHE="+goEnv["GOCACHE"],
		"GOMODCACHE="+goEnv["GOMODCACHE"],
		// -mod=mod lets go build add what the consumer's imports need
		// beyond what go get added.
		"GOFLAGS=-mod=mod",
		"GONOSUMDB=github.com/cle-dev",
		"GOPRIVATE=", "GONOPROXY=", "GOINSECURE=",
		"GOWORK=off", "GOTOOLCHAIN=local",
		"GIT_TERMINAL_PROMPT=0",
		"CGO_ENABLED=0",
		// Each run publishes the tree as it is under the same version. The
		// go command indexes a module in the module cache by its version,
		// a released version never changing, and would build a package
		// with the imports an earlier run's tree had; the index is turned
		// off so that the consumers see what this run published.
		"GODEBUG=goindex=0",
	)
}

// forgetModules takes this repository's modules out of the module cache of
// env: the extracted trees and the downloads. The cache keeps its files
// read-only, so they are made writable first.
func forgetModules(t *testing.T, env []string) {
	t.Helper()
	var modcache string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GOMODCACHE="); ok {
			modcache = v
		}
	}
	if modcache == "" {
		t.Fatal("no GOMODCACHE in the consumers' environment")
	}
	for _, dir := range []string{filepath.Join(modcache, "github.com", "cle-dev"), filepath.Join(modcache, "cache", "download", "github.com", "cle-dev")} {
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(path, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(dir); err != nil {
			t.Fatalf("take this repository's modules out of the module cache: %v", err)
		}
	}
}

// buildConsumer makes a module of its own in a temporary directory with
// testdata/<name>/main.go, go gets module@version into it and builds it.
// Its go.sum starts with the checksums this repository's modules record for
// their dependencies, as a component already depending on the same
// Kubernetes libraries would have, so that the checksum database is asked
// only about modules they do not list.
func buildConsumer(t *testing.T, env []string, root, name, moduleAtVersion string) string {
	t.Helper()
	begin := time.Now()
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", name, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	var sums bytes.Buffer
	for _, f := range []string{"go.sum", filepath.Join("contrib", "controller-runtime", "go.sum")} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			if !strings.HasPrefix(line, "github.com/cle-dev/") {
				sums.WriteString(line)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sums.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	for _, args := range [][]string{
		{"mod", "init", "example.com/" + name},
		{"get", moduleAtVersion},
		append(append([]string{"build"}, framework.GoFlags...), "-o", bin, "."),
	} {
		step := time.Now()
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("go %s: %s", strings.Join(args, " "), time.Since(step).Round(time.Millisecond))
	}
	goMod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(goMod)) {
		if strings.HasPrefix(line, "replace") {
			t.Fatalf("the consumer's go.mod replaces a module:\n%s", goMod)
		}
	}
	t.Logf("%s built outside the repository in %s", name, time.Since(begin).Round(time.Millisecond))
	return bin
}

// checkBuiltFrom checks that the binary holds each module at its version, as
// fetched (with a checksum), not replaced.
func checkBuiltFrom(t *testing.T, bin string, want map[string]string) {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for path, version := range want {
		found := false
		for _, dep := range info.Deps {
			if dep.Path != path {
				continue
			}
			found = true
			if dep.Version != version || dep.Replace != nil || dep.Sum == "" {
				t.Errorf("%s was built with %s %s (sum %q, replaced by %v), want %s fetched", bin, path, dep.Version, dep.Sum, dep.Replace, version)
			}
		}
		if !found {
			t.Errorf("%s was built without %s", bin, path)
		}
	}
}

// mayAdd are the modules that adopting cle may add to a component's module
// graph beyond what the component had: cle's own, and the Prometheus client
// the library exports its metrics with (which a controller-runtime manager
// has already). A library package that starts importing anything more (the
// controller's k8s.io/apiserver, kubectl-cle's cobra or cli-runtime) fails
// checkModuleGraph until this list says so.
var mayAdd = map[string]bool{
	rootModule:                            true,
	contribModule:                         true,
	"github.com/prometheus/client_golang": true,
	"github.com/prometheus/client_model":  true,
	"github.com/prometheus/common":        true,
	"github.com/prometheus/procfs":        true,
	"github.com/beorn7/perks":             true,
	"github.com/cespare/xxhash/v2":        true,
}

// checkModuleGraph measures what adopting cle adds to a consumer's module
// graph, and checks that it is cle's modules only: the consumer module in
// dir, tidied as a user would (go mod tidy, with env), against the same
// module without cle (its other imports, at the versions its go.mod
// requires, tidied alike). Neither the controller's nor kubectl-cle's
// dependencies (k8s.io/apiserver, cobra, ...), which the root module
// requires, may reach the consumer's go.mod or go.sum: Go's module graph
// pruning keeps them out as long as the library's packages do not import
// them. Only mayAdd may be added.
func checkModuleGraph(t *testing.T, env []string, root, dir string) {
	t.Helper()
	without := t.TempDir()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(dir, "main.go"), nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, imp := range f.Imports {
		if path := strings.Trim(imp.Path.Value, `"`); !strings.HasPrefix(path, rootModule) {
			fmt.Fprintf(&src, "\t_ %q\n", path)
		}
	}
	src.WriteString(")\n\nfunc main() {}\n")
	goMod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var mod strings.Builder
	for line := range strings.Lines(string(goMod)) {
		if !strings.HasPrefix(strings.TrimSpace(line), rootModule) {
			mod.WriteString(line)
		}
	}
	for name, data := range map[string]string{"main.go": src.String(), "go.mod": mod.String()} {
		if err := os.WriteFile(filepath.Join(without, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type graph struct {
		requires, sums int
		modules        map[string]bool
	}
	tidy := func(dir string) graph {
		t.Helper()
		cmd := exec.Command("go", "mod", "tidy")
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go mod tidy in %s: %v\n%s", dir, err, out)
		}
		g := graph{modules: map[string]bool{}}
		for _, name := range []string{"go.mod", "go.sum"} {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.Lines(string(data)) {
				fields := strings.Fields(strings.TrimPrefix(line, "require "))
				if len(fields) < 2 || !strings.HasPrefix(fields[1], "v") {
					continue
				}
				g.modules[fields[0]] = true
				if name == "go.mod" {
					g.requires++
				} else {
					g.sums++
				}
			}
		}
		return g
	}
	with, before := tidy(dir), tidy(without)
	var added []string
	for m := range with.modules {
		if !before.modules[m] {
			added = append(added, m)
		}
	}
	sort.Strings(added)
	for _, m := range added {
		if !mayAdd[m] {
			t.Errorf("adopting cle adds %s to the consumer's go.mod or go.sum: the library should add only %v", m, slices.Sorted(maps.Keys(mayAdd)))
		}
	}
	t.Logf("adopting cle: go.mod %d -> %d requirements, go.sum %d -> %d lines; modules added: %s",
		before.requires, with.requires, before.sums, with.sums, strings.Join(added, ", "))
}

// electionTimeout bounds an election of a fetched consumer: the controller
// gathers candidates for a second, and the elector leads at its next poll
// (1.3 s with the default timings); a loaded machine may take much longer.
const electionTimeout = time.Minute

// waitOutput waits until a line of the child's output is line.
func waitOutput(t *testing.T, c *framework.Child, line string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, electionTimeout, true, func(context.Context) (bool, error) {
		select {
		case <-c.Exited():
			return false, fmt.Errorf("exited")
		default:
		}
		sc := bufio.NewScanner(strings.NewReader(c.Logs()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if sc.Text() == line {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no line %q from the consumer: %v", line, err)
	}
}

// onlyCandidate returns the name of the one LeaseCandidate of lease.
func onlyCandidate(t *testing.T, ns, lease string) string {
	t.Helper()
	list, err := server.Client().CoordinationV1beta1().LeaseCandidates(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, lc := range list.Items {
		if lc.Spec.LeaseName == lease {
			names = append(names, lc.Name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("LeaseCandidates of %s: %q, want one", lease, names)
	}
	return names[0]
}

// waitHolder waits until the Lease names holder.
func waitHolder(t *testing.T, ns, lease, holder string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, electionTimeout, true, func(ctx context.Context) (bool, error) {
		l, err := server.Client().CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = "no Lease"
			return false, nil
		}
		if err != nil {
			return false, err
		}
		last = ptr.Deref(l.Spec.HolderIdentity, "")
		return last == holder, nil
	})
	if err != nil {
		t.Fatalf("Lease %s holder %q, want %q: %v", lease, last, holder, err)
	}
}
