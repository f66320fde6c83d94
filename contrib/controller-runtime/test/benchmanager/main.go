// Command benchmanager is the controller-runtime candidate of the
// side-by-side benchmarks (test/bench, scenario 8): a manager whose only
// leader runnable prints one line to stdout at the moment it starts and the
// moment it returns, in the format of test/bench/cand:
//
//	started-leading identity=<id>
//	stopped-leading identity=<id>
//
// --kind picks how it is elected:
//
//	lock   coordinated election through cle (contrib/controller-runtime's
//	       NewManager, pkg/lock), elected by cle-controller
//	plain  controller-runtime's own leader election on a Lease: no
//	       coordination
//
// Both use controller-runtime's default timings (15s, 10s, 2s) and release
// the Lease on shutdown (SIGTERM or SIGINT).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cle "github.com/cle-dev/cle/contrib/controller-runtime"
)

func main() {
	fs := flag.NewFlagSet("benchmanager", flag.ContinueOnError)
	kind := fs.String("kind", "lock", "lock or plain")
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: in-cluster, or $KUBECONFIG)")
	apiMode := fs.String("api-mode", "native", "API mode of --kind=lock: native or portable")
	var o cle.Options
	fs.StringVar(&o.Namespace, "namespace", "default", "namespace of the Lease")
	fs.StringVar(&o.LeaseName, "lease", "", "name of the Lease (required)")
	fs.StringVar(&o.Identity, "identity", "", "this replica's identity (required)")
	fs.StringVar(&o.BinaryVersion, "binary-version", "1.36.0", "binary version")
	fs.StringVar(&o.EmulationVersion, "emulation-version", "", "emulation version (default: the binary version)")
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if o.LeaseName == "" || o.Identity == "" {
		fmt.Fprintln(os.Stderr, "benchmanager: --lease and --identity are required")
		os.Exit(2)
	}
	ctrl.SetLogger(klog.Background())
	o.APIMode = *apiMode
	if err := run(ctrl.SetupSignalHandler(), *kind, *kubeconfig, o); err != nil {
		klog.Background().Error(err, "Manager failed", "identity", o.Identity)
		os.Exit(1)
	}
}

func run(ctx context.Context, kind, kubeconfig string, o cle.Options) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "cle-bench-manager-" + kind + "/" + o.Identity
	opts := manager.Options{
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{o.Namespace: {}}},
		GracefulShutdownTimeout: ptr.To(time.Duration(-1)), // wait for the leader runnable
	}
	var mgr manager.Manager
	switch kind {
	case "lock":
		mgr, _, err = cle.NewManager(cfg, opts, o)
	case "plain":
		opts.LeaderElection = true
		opts.LeaderElectionID = o.LeaseName
		opts.LeaderElectionNamespace = o.Namespace
		opts.LeaderElectionReleaseOnCancel = true
		opts.LeaseDuration = ptr.To(cle.DefaultLeaseDuration)
		opts.RenewDeadline = ptr.To(cle.DefaultRenewDeadline)
		opts.RetryPeriod = ptr.To(cle.DefaultRetryPeriod)
		mgr, err = manager.New(cfg, opts)
	default:
		return fmt.Errorf("unknown --kind %q", kind)
	}
	if err != nil {
		return err
	}
	var running sync.WaitGroup
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		running.Add(1)
		defer running.Done()
		say("started-leading", o.Identity)
		defer say("stopped-leading", o.Identity)
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	err = mgr.Start(ctx)
	running.Wait()
	return err
}

var out sync.Mutex

func say(event, id string) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf("%s identity=%s\n", event, id)
}
