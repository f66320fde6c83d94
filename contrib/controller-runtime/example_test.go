package cle_test

import (
	"log"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	cle "github.com/cle-dev/cle/contrib/controller-runtime"
)

// A controller-runtime manager elected through cle: NewManager takes the
// place of ctrl.NewManager, with the Lease and this replica's versions. The
// manager's own client refuses writes whenever this replica is not leader
// (GuardClient), and Start hands the Lease over and withdraws the
// LeaseCandidate before it returns.
func ExampleNewManager() {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Fatal(err)
	}
	mgr, _, err := cle.NewManager(cfg, manager.Options{}, cle.Options{
		Namespace:        "my-system",
		LeaseName:        "my-operator",
		BinaryVersion:    "1.36.0",
		EmulationVersion: "1.35.0",
		GuardClient:      true,
	})
	if err != nil {
		log.Fatal(err)
	}
	// Register reconcilers with mgr as usual, then:
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Fatal(err)
	}
}
