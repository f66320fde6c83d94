// Command elector is a component built on client-go's LeaderElector with the
// change docs/adopt.md describes for adopting cle: pkg/lock's resource lock
// and its timings in the LeaderElectionConfig. TestFetchedModules builds it
// in a module of its own, outside the repository, from the released modules.
// It prints "started-leading identity=<id>" when it leads.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig")
	namespace := flag.String("namespace", "default", "namespace of the Lease")
	lease := flag.String("lease", "my-controller", "name of the Lease")
	id := flag.String("identity", "", "this process's identity")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace, *lease, *id); err != nil {
		klog.Background().Error(err, "elector failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace, lease, id string) error {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	lk, err := lock.New(lock.Config{Candidate: candidate.Config{
		RestConfig:       restConfig,
		Namespace:        namespace,
		LeaseName:        lease,
		Identity:         id,
		BinaryVersion:    "1.36.0",
		EmulationVersion: "1.35.0",
		LeaseDuration:    15 * time.Second,
		RenewDeadline:    10 * time.Second,
		RetryPeriod:      2 * time.Second,
	}})
	if err != nil {
		return err
	}
	ld, rd, rp := lk.Timings() // the elector must use the candidate's timings
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lk, LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp,
		ReleaseOnCancel: true,
		Callbacks: lk.Callbacks(leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				fmt.Printf("started-leading identity=%s\n", lk.Identity())
				<-ctx.Done()
			},
			OnStoppedLeading: func() {},
		}),
	})
	if err != nil {
		return err
	}
	le.Run(lk.ElectorContext(ctx))
	return lk.Close(context.Background())
}
