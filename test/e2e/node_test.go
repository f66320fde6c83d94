package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cle-dev/cle/test/integration/framework"
)

// The node's network, all inside its network namespace: its address (on
// the loopback interface: the kernel here has no dummy links), the Pods'
// bridge network and the Services' range.
const (
	nodeName = "e2e-node"
	nodeIP   = "172.31.255.1"
	podCIDR  = "10.88.0.0/24"
)

// workDirEnv passes the node's directory from the outer TestMain, which
// removes it once the node's mounts are gone.
const workDirEnv = "CLE_E2E_DIR"

// node is the running single-node cluster the tests use.
type node struct {
	dir        string
	server     *framework.Server
	client     kubernetes.Interface
	kubeconfig string
	binDir     string // kubectl and the Kubernetes binaries
	pluginDir  string // kubectl-cle from the release
	staticPods string // the kubelet's manifest directory
	socket     string // containerd's
	ctr        string
	release    *release

	containerd *framework.Child
	components []*framework.Child // in start order
	logs       map[string]string  // component -> log file

	// The release as the stand-ins of the hosting services publish it
	// (publish_test.go): the URL its assets are downloaded from, the
	// chart's OCI reference, and containerd's registry hosts directory.
	assetsURL, chartRef, registryHosts string

	// beforeChartInstall, when set, runs in installChart once the
	// release's namespace exists, before helm install.
	beforeChartInstall func(t *testing.T)
}

// cluster is the node of this run.
var cluster *node

// runNode is TestMain inside the namespaces.
func runNode(m *testing.M) int {
	ctx := context.Background()
	n := &node{dir: os.Getenv(workDirEnv), logs: map[string]string{}}
	if n.dir == "" {
		fmt.Fprintf(os.Stderr, "e2e: %s is not set\n", workDirEnv)
		return 1
	}
	begin := time.Now()
	if err := n.start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: bring up the node: %v\n", err)
		n.dumpLogs()
		_ = n.stop(ctx)
		return 1
	}
	fmt.Printf("e2e: node %s Ready with the control plane, containerd and kube-proxy in %s\n", nodeName, time.Since(begin).Round(100*time.Millisecond))
	cluster = n
	code := m.Run()
	if code != 0 {
		n.dumpLogs()
	}
	begin = time.Now()
	if err := n.stop(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: tear down the node: %v\n", err)
		n.dumpLogs()
		code = 1
	} else {
		fmt.Printf("e2e: node torn down in %s: no container, no process left in its namespaces\n", time.Since(begin).Round(100*time.Millisecond))
	}
	return code
}

func (n *node) start(ctx context.Context) error {
	if err := setupNamespaces(); err != nil {
		return err
	}
	var err error
	if n.release, err = openRelease(); err != nil {
		return err
	}
	if n.binDir, err = framework.BinDir(); err != nil {
		return err
	}
	for _, bin := range []string{"kubelet", "kube-controller-manager", "kube-proxy", "kubectl"} {
		if _, err := framework.Binary(bin); err != nil {
			return fmt.Errorf("%w (hack/kube-bin.sh %s)", err, bin)
		}
	}
	n.pluginDir = filepath.Join(n.dir, "plugins")
	if err := n.release.extractPlugin(n.pluginDir); err != nil {
		return err
	}

	n.server, err = framework.Start(ctx, framework.Options{
		CoordinatedLeaderElection: true,
		IdleBuiltinController:     true,
		AdvertiseAddress:          nodeIP,
		ServiceAccountAdmission:   true,
		Users:                     []framework.User{{Name: staticPodUser}},
		// The kubelet is reached at its InternalIP: there is no DNS for
		// its name (kubectl logs).
		ExtraAPIServerFlags: []string{"--kubelet-preferred-address-types=InternalIP"},
		Logf:                func(f string, a ...any) { fmt.Printf("e2e: "+f+"\n", a...) },
	})
	if err != nil {
		return fmt.Errorf("start etcd and kube-apiserver: %w", err)
	}
	// The tests' own client keeps the API's deprecation warnings to itself.
	cfg := n.server.Config()
	cfg.WarningHandler = rest.NoWarnings{}
	n.client = kubernetes.NewForConfigOrDie(cfg)
	n.kubeconfig = filepath.Join(n.dir, "admin.kubeconfig")
	if err := n.server.WriteKubeconfig(n.kubeconfig); err != nil {
		return err
	}

	if err := n.publish(ctx); err != nil {
		return err
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	if err := n.importImages(ctx); err != nil {
		return err
	}
	if err := n.startComponents(); err != nil {
		return err
	}
	return n.waitReady(ctx)
}

// setupNamespaces prepares the new mount and network namespaces: tmpfs
// over the host paths the node writes to whatever its flags say, and the
// node's address.
func setupNamespaces() error {
	for _, dir := range []string{"/var/lib", "/var/log", "/run", etcKubernetes} {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
		}
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", nodeIP + "/32", "dev", "lo"},
		// Locally generated packets to a ClusterIP need a route before
		// kube-proxy's rules rewrite them; the namespace has no default one.
		{"route", "add", framework.ServiceClusterIPRange, "dev", "lo", "src", nodeIP},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func (n *node) startContainerd(ctx context.Context) error {
	dir, err := containerdDir()
	if err != nil {
		return err
	}
	n.ctr = filepath.Join(dir, "ctr")
	cni, err := cniBinDir()
	if err != nil {
		return err
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return err
	}
	root := filepath.Join(n.dir, "containerd")
	n.socket = filepath.Join(root, "containerd.sock")
	cniConf := filepath.Join(n.dir, "cni", "net.d")
	cniBin := filepath.Join(n.dir, "cni", "bin")
	for _, d := range []string{root, cniConf, cniBin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Only the plugins the network needs, whatever else the directory has.
	for _, p := range cniPlugins {
		if err := os.Symlink(filepath.Join(cni, p), filepath.Join(cniBin, p)); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(cniConf, "10-e2e.conflist"), fmt.Sprintf(cniConfig, filepath.Join(n.dir, "cni", "ipam"), podCIDR)); err != nil {
		return err
	}
	config := filepath.Join(root, "config.toml")
	if err := writeFile(config, strings.NewReplacer("ROOT", root, "SOCKET", n.socket, "RUNC", runc, "CNIBIN", cniBin, "CNICONF", cniConf, "PAUSE", pauseImage, "HOSTS", n.registryHosts).Replace(containerdConfig)); err != nil {
		return err
	}
	// containerd finds its shim on PATH: this release's first, not a
	// distribution's older one.
	if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return err
	}
	if n.containerd, err = n.startComponent("containerd", filepath.Join(dir, "containerd"), "--config="+config); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-n.containerd.Exited():
			return false, errors.New("containerd exited")
		default:
		}
		_, err := n.ctrRun(ctx, "version")
		return err == nil, nil
	})
}

// importImages loads the sandbox image and the benchmark's candidates into
// containerd's CRI namespace; the release's image is pulled from the
// registry it was published to (publish).
func (n *node) importImages(ctx context.Context) error {
	pause := filepath.Join(n.dir, "pause.tar")
	if err := writePauseImage(pause, filepath.Join(n.dir, "pause")); err != nil {
		return err
	}
	if _, err := n.ctrRun(ctx, "images", "import", pause); err != nil {
		return err
	}
	// The benchmark's candidates (test/bench/cand and contrib's
	// benchmanager), for the crash failover of the built-in controller's
	// candidates and of cle's adoption paths, and contrib's sharded
	// example.
	for _, img := range []struct{ name, ref string }{{"cand", candImage}, {"manager", managerImage}, {"sharded", shardedImage}} {
		archive := filepath.Join(n.dir, img.name+".tar")
		if err := writeImage(archive, filepath.Join(n.dir, img.name), img.name, img.ref); err != nil {
			return err
		}
		if _, err := n.ctrRun(ctx, "images", "import", archive); err != nil {
			return err
		}
	}
	return nil
}

func (n *node) ctrRun(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.ctr, append([]string{"--address=" + n.socket, "--namespace=k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (n *node) startComponents() error {
	kcm, _ := framework.Binary("kube-controller-manager")
	sched, _ := framework.Binary("kube-scheduler")
	kubelet, _ := framework.Binary("kubelet")
	proxy, _ := framework.Binary("kube-proxy")
	if _, err := n.startComponent("kube-controller-manager", kcm,
		"--kubeconfig="+n.kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=10257",
		"--service-account-private-key-file="+n.server.ServiceAccountKeyFile(),
		"--root-ca-file="+n.server.CAFile(),
		"--use-service-account-credentials=false", "--allocate-node-cidrs=false",
		"--service-cluster-ip-range="+framework.ServiceClusterIPRange,
		// Its serving certificate is self-signed, not a CA to publish.
		"--controllers=*,-kube-apiserver-serving-clustertrustbundle-publisher-controller",
		"--v=1"); err != nil {
		return err
	}
	if _, err := n.startComponent("kube-scheduler", sched,
		"--kubeconfig="+n.kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=10259", "--v=1"); err != nil {
		return err
	}
	n.staticPods = filepath.Join(n.dir, "kubelet", "manifests")
	if err := os.MkdirAll(n.staticPods, 0o755); err != nil {
		return err
	}
	config := filepath.Join(n.dir, "kubelet", "config.yaml")
	if err := writeFile(config, strings.NewReplacer("SOCKET", n.socket, "STATIC", n.staticPods, "PODLOGS", filepath.Join(n.dir, "kubelet", "pod-logs")).Replace(kubeletConfig)); err != nil {
		return err
	}
	if _, err := n.startComponent("kubelet", kubelet,
		"--config="+config, "--kubeconfig="+n.kubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet", "root"),
		"--cert-dir="+filepath.Join(n.dir, "kubelet", "pki"),
		"--hostname-override="+nodeName, "--node-ip="+nodeIP, "--v=1"); err != nil {
		return err
	}
	_, err := n.startComponent("kube-proxy", proxy,
		"--kubeconfig="+n.kubeconfig, "--hostname-override="+nodeName,
		"--proxy-mode=iptables", "--cluster-cidr="+podCIDR,
		// Leave the host's conntrack table size alone.
		"--conntrack-max-per-core=0",
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256", "--v=1")
	return err
}

func (n *node) startComponent(name, path string, args ...string) (*framework.Child, error) {
	log := filepath.Join(n.dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		return nil, err
	}
	c, err := framework.StartProcess(name, path, log, args...)
	if err != nil {
		return nil, err
	}
	n.logs[name] = log
	if name != "containerd" {
		n.components = append(n.components, c)
	}
	return c, nil
}

// waitReady waits for the node to be Ready and for kube-controller-manager
// to have made the default ServiceAccount, without which no Pod is admitted.
func (n *node) waitReady(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err := n.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready: %w", nodeName, err)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := n.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// stop tears the node down in order: no Pod may be left (the tests delete
// theirs), then no container; then the components, containerd, and the
// control plane; then no process may be left in the PID namespace.
func (n *node) stop(ctx context.Context) error {
	var errs []error
	if n.client != nil && n.containerd != nil {
		errs = append(errs, n.drain(ctx))
	}
	for i := len(n.components) - 1; i >= 0; i-- {
		if err := n.components[i].Stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if n.containerd != nil {
		if err := n.containerd.Stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if n.server != nil {
		if err := n.server.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, noProcessesLeft(ctx))
	return errors.Join(errs...)
}

// drain waits until no Pod is bound to the node and containerd runs no
// container, so that every sandbox, network and mount was undone by the
// kubelet and containerd rather than by the namespaces' end.
func (n *node) drain(ctx context.Context) error {
	var pods []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := n.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil {
			return false, nil
		}
		pods = pods[:0]
		for _, p := range list.Items {
			pods = append(pods, p.Namespace+"/"+p.Name)
		}
		return len(pods) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("Pods still on the node (a test did not delete them): %v", pods)
	}
	var tasks string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := n.ctrRun(ctx, "tasks", "ls")
		if err != nil {
			return false, nil
		}
		tasks = out
		return !strings.Contains(out, "RUNNING") && !strings.Contains(out, "PAUSED"), nil
	})
	if err != nil {
		return fmt.Errorf("containers still running with no Pod on the node:\n%s", tasks)
	}
	return nil
}

// noProcessesLeft checks that this process, PID 1 of the node's PID
// namespace, is the only one left in it. Shims re-parented to it are reaped
// first.
func noProcessesLeft(ctx context.Context) error {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		left = left[:0]
		stats, _ := filepath.Glob("/proc/[0-9]*/comm")
		for _, s := range stats {
			pid := filepath.Base(filepath.Dir(s))
			if pid == "1" {
				continue
			}
			comm, err := os.ReadFile(s)
			if err == nil {
				left = append(left, pid+" "+strings.TrimSpace(string(comm)))
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		sort.Strings(left)
		return fmt.Errorf("processes left in the node: %v", left)
	}
	return nil
}

// dumpLogs prints the end of each component's log, and copies them all to
// CLE_E2E_LOG_DIR when that is set.
func (n *node) dumpLogs() {
	keep := os.Getenv("CLE_E2E_LOG_DIR")
	names := make([]string, 0, len(n.logs))
	for name := range n.logs {
		names = append(names, name)
	}
	sort.Strings(names)
	if n.server != nil {
		fmt.Println("---- kube-apiserver and etcd ----")
		n.server.DumpLogs(os.Stdout)
	}
	for _, name := range names {
		data, err := os.ReadFile(n.logs[name])
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		fmt.Printf("---- %s (last %d lines) ----\n%s\n", name, len(lines), strings.Join(lines, "\n"))
		if keep != "" {
			_ = os.MkdirAll(keep, 0o755)
			_ = os.WriteFile(filepath.Join(keep, name+".log"), data, 0o644)
		}
	}
}

// containerdDir holds containerd, ctr and the runc shim: CLE_CONTAINERD_DIR,
// or what hack/containerd.sh builds.
func containerdDir() (string, error) {
	dir := os.Getenv("CLE_CONTAINERD_DIR")
	if dir == "" {
		out, err := exec.Command("bash", framework.RepoPath("hack/containerd.sh")).Output()
		if err != nil {
			return "", fmt.Errorf("hack/containerd.sh: %w", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, bin := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("containerd: %w (hack/containerd.sh builds it)", err)
		}
	}
	return dir, nil
}

// writeFile writes data to path by a rename, so that a kubelet watching
// the directory never reads half a file.
func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
