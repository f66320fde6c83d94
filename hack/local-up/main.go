// Command local-up runs a local control plane (etcd and kube-apiserver built
// by hack/kube-bin.sh) on loopback until interrupted, and writes a kubeconfig
// for it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cle-dev/cle/test/integration/framework"
)

func main() {
	native := flag.Bool("native", true, "turn the CoordinatedLeaderElection feature gate on (native mode); off gives a server like most clusters (portable mode)")
	kubeconfig := flag.String("kubeconfig-out", "_output/local-up/kubeconfig", "where to write the admin kubeconfig")
	flag.Parse()
	if err := run(*native, *kubeconfig); err != nil {
		fmt.Fprintf(os.Stderr, "local-up: %v\n", err)
		os.Exit(1)
	}
}

func run(native bool, kubeconfig string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "local-up: "+format+"\n", args...) }
	server, err := framework.Start(ctx, framework.Options{CoordinatedLeaderElection: native, Logf: logf})
	if err != nil {
		return err
	}
	defer func() {
		logf("stopping the control plane")
		if err := server.Stop(); err != nil {
			logf("stop: %v", err)
		}
	}()

	path, err := filepath.Abs(kubeconfig)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := server.WriteKubeconfig(path); err != nil {
		return err
	}
	defer os.Remove(path)

	binDir, err := framework.BinDir()
	if err != nil {
		return err
	}
	mode := "native (CoordinatedLeaderElection on)"
	if !native {
		mode = "portable (CoordinatedLeaderElection off)"
	}
	fmt.Printf(`
Control plane running at %s, mode %s.
Logs: %s
In another terminal:

  export KUBECONFIG=%s PATH=%s:$PATH
  kubectl get leases,leasecandidates -A

Press Ctrl-C to stop.
`, server.URL(), mode, server.Dir(), path, binDir)
	<-ctx.Done()
	return nil
}
