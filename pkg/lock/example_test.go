package lock_test

import (
	"context"
	"log"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
)

// A component that runs client-go's LeaderElector keeps it, and takes the
// Lock as its lock: the elector runs with the lock's timings, its callbacks
// tell the lock when leader work has returned, and it runs on the lock's
// ElectorContext, so that a preempted elector stops and hands over at once.
func ExampleNew() {
	ctx := context.Background()
	restConfig, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	lk, err := lock.New(lock.Config{Candidate: candidate.Config{
		RestConfig:       restConfig,
		Namespace:        "kube-system",
		LeaseName:        "my-controller",
		BinaryVersion:    "1.36.0",
		EmulationVersion: "1.35.0",
	}})
	if err != nil {
		log.Fatal(err)
	}
	leaseDuration, renewDeadline, retryPeriod := lk.Timings()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lk,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: lk.Callbacks(leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				// Leader work: lk.Candidate().WrapConfig guards its
				// writes, candidate.TokenFrom(ctx) is its token.
				<-ctx.Done()
			},
			OnStoppedLeading: func() {},
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	le.Run(lk.ElectorContext(ctx))
	// Close finishes the hand-over and deletes the LeaseCandidate.
	if err := lk.Close(context.Background()); err != nil {
		log.Print(err)
	}
}
