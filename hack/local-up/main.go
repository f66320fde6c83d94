// Command local-up runs a local demonstration of coordinated leader election
// until interrupted: a control plane (etcd and kube-apiserver built by
// hack/kube-bin.sh) on loopback, an election controller, and three example
// candidates at different emulation versions contending for one Lease. It
// writes a kubeconfig and prints the kubectl commands that show the election.
// Ctrl-C stops the candidates (they release the Lease), the controller and
// the control plane, in that order.
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
	flag.IntVar(&o.candidates, "candidates", 3, "number of example candidates (0-3); 0 starts only the control plane")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "local-up: %v\n", err)
		os.Exit(1)
	}
}

// versions of the example candidates, started newest first so that the
// election visibly moves to the oldest emulation version as they join.
var versions = []struct{ identity, emulation string }{
	{"candidate-1-36", "1.36.0"},
	{"candidate-1-35", "1.35.0"},
	{"candidate-1-34", "1.34.0"},
}

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
	if o.candidates < 0 || o.candidates > len(versions) {
		return fmt.Errorf("--candidates must be between 0 and %d", len(versions))
	}

	server, err := framework.Start(ctx, framework.Options{
		CoordinatedLeaderElection: o.native,
		// With cle-controller, the built-in controller is held off by the
		// framework's idler holding its Lease, so exactly one controller
		// elects.
		IdleBuiltinController: o.native && o.controller == "cle",
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
	fmt.Printf(`
Control plane running at %s, mode %s.
Election controller: %s.
Server logs: %s; controller and candidate logs: %s
In another terminal:

  export KUBECONFIG=%s PATH=%s:$PATH
  kubectl get leases,leasecandidates -n %s -w        # who holds the Lease, who is a candidate
  kubectl get lease %s -n %s -o yaml                  # holderIdentity, preferredHolder, leaseTransitions
  kubectl get events -n %s --field-selector involvedObject.kind=Lease

Stop a leader with "kill <pid>" (it hands over) or "kill -STOP <pid>" (it loses the Lease when it expires).
Press Ctrl-C to stop everything.

`, server.URL(), mode, controller, server.Dir(), logs, kubeconfig, binDir, o.namespace, o.lease, o.namespace, o.namespace)

	for i, v := range versions[:o.candidates] {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(3 * time.Second):
			}
		}
		c, err := startChild(o, v.identity, "candidate",
			"--kubeconfig="+kubeconfig, "--namespace="+o.namespace, "--lease="+o.lease,
			"--identity="+v.identity, "--binary-version=1.36.0", "--emulation-version="+v.emulation)
		if err != nil {
			return err
		}
		children = append(children, c)
		fmt.Printf("started %s (emulation version %s), pid %d\n", v.identity, v.emulation, c.cmd.Process.Pid)
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
	err    error         // its exit status, after exited
}

func startChild(o options, name, binary string, args ...string) (*child, error) {
	path, err := filepath.Abs(filepath.Join(o.binDir, binary))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s not built (run make build): %w", binary, err)
	}
	logFile, err := os.Create(filepath.Join(o.logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
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
	c := &child{name: name, cmd: cmd, log: logFile, exited: make(chan struct{})}
	// Reap it as soon as it exits (one killed by hand must not linger as a
	// zombie), after echoing all it printed.
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Printf("%s  [%s] %s\n", time.Now().Format("15:04:05.000"), name, sc.Text())
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
