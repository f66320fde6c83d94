// Command local-up runs a local demonstration of coordinated leader election:
// a control plane (etcd and kube-apiserver built by hack/kube-bin.sh) on
// loopback, an election controller, and three replicas of an example
// component at version 1.35 contending for one Lease, shown live by
// `kubectl cle watch`. Then it upgrades the replicas to 1.36 one at a time,
// the leader first, and checks at each step that the leader is never newer
// than a live replica: leadership stays on 1.35 until no 1.35 replica is
// left. It writes a kubeconfig and prints the kubectl commands to look
// around, and runs until interrupted (or exits after the upgrade with
// --exit-after-demo). Ctrl-C stops the replicas (they hand the Lease over),
// the watch, the controller and the control plane, in that order.
//
// With --cluster it runs the same demonstration on the cluster of
// $KUBECONFIG instead, deployed from manifests/ (see cluster.go), and deletes
// what it created on exit.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cle-dev/cle/test/integration/framework"
)

type options struct {
	native     bool
	controller string
	kubeconfig string
	binDir     string
	logDir     string
	namespace  string
	lease      string
	candidates int
	upgrade    bool
	exitAfter  bool
	stepPause  time.Duration
	// In a cluster (--cluster):
	cluster        bool
	image          string
	manifests      string
	rolloutTimeout time.Duration
}

func main() {
	var o options
	flag.BoolVar(&o.native, "native", true, "turn the CoordinatedLeaderElection feature gate on (native mode); off gives a server like most clusters (portable mode)")
	flag.StringVar(&o.controller, "controller", "cle", `election controller: "cle" (cle-controller; the built-in one is idled) or "builtin" (the one inside kube-apiserver; native only)`)
	flag.StringVar(&o.kubeconfig, "kubeconfig-out", "_output/local-up/kubeconfig", "where to write the admin kubeconfig")
	flag.StringVar(&o.binDir, "bin-dir", "bin", "where cle-controller and candidate were built (make build)")
	flag.StringVar(&o.logDir, "log-dir", "_output/local-up/logs", "where the controller's and the candidates' logs go")
	flag.StringVar(&o.namespace, "namespace", "default", "namespace of the example Lease and candidates")
	flag.StringVar(&o.lease, "lease", "example", "name of the example Lease")
	flag.IntVar(&o.candidates, "candidates", 3, "number of example replicas (0-3); 0 starts only the control plane")
	flag.BoolVar(&o.upgrade, "upgrade", true, "after the first election, upgrade the replicas from 1.35 to 1.36 one at a time, the leader first")
	flag.DurationVar(&o.stepPause, "step-pause", 3*time.Second, "pause between the steps of the upgrade, to read what happened")
	flag.BoolVar(&o.cluster, "cluster", false, "deploy to the cluster of $KUBECONFIG from the manifests (cle-controller in portable mode unless one is installed, then manifests/examples) instead of starting a local control plane; on exit, delete what was created")
	flag.StringVar(&o.image, "image", "", "with --cluster: cle's image (make image), which the cluster must be able to pull (required)")
	flag.StringVar(&o.manifests, "manifests", "manifests", "with --cluster: the directory of the kustomize bases")
	flag.DurationVar(&o.rolloutTimeout, "rollout-timeout", 5*time.Minute, "with --cluster: how long a Deployment may take to have its replicas available")
	flag.BoolVar(&o.exitAfter, "exit-after-demo", false, "stop everything and exit once the demonstration is done, instead of waiting for Ctrl-C (for tests)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "local-up: %v\n", err)
		os.Exit(1)
	}
}

// The example component's versions before and after the upgrade.
const (
	oldVersion = "1.35.0"
	newVersion = "1.36.0"
)

// replicas names the example component's replicas.
var replicas = []string{"replica-a", "replica-b", "replica-c"}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "local-up: "+format+"\n", args...) }
	if o.controller != "cle" && o.controller != "builtin" {
		return fmt.Errorf("--controller must be cle or builtin, got %q", o.controller)
	}
	if o.controller == "builtin" && !o.native {
		return errors.New("--controller=builtin needs --native")
	}
	if o.candidates < 0 || o.candidates > len(replicas) {
		return fmt.Errorf("--candidates must be between 0 and %d", len(replicas))
	}
	if o.cluster && o.image == "" {
		return errors.New("--cluster needs --image: the image the cluster pulls (hack/run.sh --cluster passes the one make image built)")
	}
	if o.cluster {
		err := runCluster(ctx, o, logf)
		if err != nil && ctx.Err() != nil {
			fmt.Println()
			return nil // interrupted: what was created is deleted
		}
		return err
	}

	server, err := framework.Start(ctx, framework.Options{
		CoordinatedLeaderElection: o.native,
		// With cle-controller, the built-in controller is held off by the
		// framework's idler holding its Lease, so exactly one controller
		// elects.
		IdleBuiltinController: o.native && o.controller == "cle",
		PortableCRD:           !o.native,
		Logf:                  logf,
	})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping the control plane")
		if err := server.Stop(); err != nil {
			logf("stop: %v", err)
		}
	}()

	kubeconfig, err := filepath.Abs(o.kubeconfig)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(kubeconfig), err)
	}
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	defer os.Remove(kubeconfig)
	// kubectl caches discovery per host and port for hours: a server started
	// earlier on the same loopback port, in another mode, would make it look
	// resources up in the wrong API group. This server gets a cache of its
	// own, which kubectl and kubectl cle (run from here, or with the printed
	// exports) use.
	cacheDir, err := os.MkdirTemp("", "cle-local-up-kube-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cacheDir)
	if err := os.Setenv("KUBECACHEDIR", cacheDir); err != nil {
		return err
	}
	if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", o.logDir, err)
	}

	var children []*child
	defer func() {
		// Candidates first, so that they release the Lease while the
		// controller and the server still run.
		for i := len(children) - 1; i >= 0; i-- {
			children[i].stop(logf)
		}
	}()
	if o.controller == "cle" {
		c, err := startChild(o, "cle-controller", "cle-controller",
			"--kubeconfig="+kubeconfig, "--leader-elect=false",
			"--metrics-bind-address=0", "--health-probe-bind-address=0")
		if err != nil {
			return err
		}
		children = append(children, c)
	}

	binDir, err := framework.BinDir()
	if err != nil {
		return err
	}
	mode := "native (CoordinatedLeaderElection on)"
	if !o.native {
		mode = "portable (CoordinatedLeaderElection off)"
	}
	controller := "cle-controller (the built-in controller is idled)"
	if o.controller == "builtin" {
		controller = "the controller built into kube-apiserver"
	}
	logs, _ := filepath.Abs(o.logDir)
	cleBin, _ := filepath.Abs(o.binDir)
	fmt.Printf(`
Control plane running at %s, mode %s.
Election controller: %s.
Server logs: %s; controller and candidate logs: %s
In another terminal:

  export KUBECONFIG=%s KUBECACHEDIR=%s PATH=%s:%s:$PATH
  kubectl cle watch -n %s                          # one line per change of holder, preferred holder, candidates
  kubectl cle status -n %s                         # who holds, who should, the election's state
  kubectl cle describe %s -n %s                    # the candidates ranked, recent Events, and why
  kubectl get events -n %s --field-selector involvedObject.kind=Lease

Stop a leader with "kill <pid>" (it hands over) or "kill -STOP <pid>" (it loses the Lease when it expires).
Press Ctrl-C to stop everything.

`, server.URL(), mode, controller, server.Dir(), logs, kubeconfig, cacheDir, cleBin, binDir, o.namespace, o.namespace, o.lease, o.namespace, o.namespace)

	d := &demo{o: o, ctx: ctx, kubeconfig: kubeconfig, client: framework.MustClient(server.Config()), children: &children, live: map[string]string{}}
	if o.candidates > 0 {
		if err := d.startWatch(filepath.Join(binDir, "kubectl")); err != nil {
			return err
		}
		if err := d.run(); err != nil {
			if ctx.Err() != nil {
				fmt.Println()
				return nil // interrupted: stop everything
			}
			return err
		}
	}
	if o.exitAfter {
		fmt.Println("\nDemonstration done; stopping.")
		return nil
	}
	<-ctx.Done()
	fmt.Println()
	return nil
}

// child is a process started by local-up; its stdout is echoed with its
// name, its stderr goes to a log file.
type child struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed once the process is reaped
	// printed is closed when the child prints its first line (or exits).
	printed chan struct{}
	err     error // its exit status, after exited
}

func startChild(o options, name, binary string, args ...string) (*child, error) {
	path, err := filepath.Abs(filepath.Join(o.binDir, binary))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s not built (run make build): %w", binary, err)
	}
	return startCommand(o, name, path, nil, args...)
}

// startCommand starts path with args, and env added to the environment.
func startCommand(o options, name, path string, env []string, args ...string) (*child, error) {
	logFile, err := os.Create(filepath.Join(o.logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = logFile
	// Its own process group, so that Ctrl-C in the terminal reaches only
	// local-up, which stops the children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logFile, exited: make(chan struct{}), printed: make(chan struct{})}
	// Reap it as soon as it exits (one killed by hand must not linger as a
	// zombie), after echoing all it printed.
	go func() {
		defer close(c.exited)
		var once sync.Once
		defer once.Do(func() { close(c.printed) })
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Printf("%s  [%s] %s\n", time.Now().Format("15:04:05.000"), name, sc.Text())
			once.Do(func() { close(c.printed) })
		}
		_, _ = io.Copy(io.Discard, stdout)
		c.err = cmd.Wait()
	}()
	return c, nil
}

// stop sends SIGTERM (after SIGCONT, in case it was paused) and waits; it
// kills the child if it does not exit in time.
func (c *child) stop(logf func(string, ...any)) {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		logf("%s did not exit within 20s; killing it", c.name)
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	if c.err != nil {
		logf("%s exited: %v", c.name, c.err)
	}
	c.log.Close()
}
