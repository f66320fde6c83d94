// Command example is a controller-runtime manager with one reconciler that
// takes part in coordinated leader election through cle: run several
// replicas with different --emulation-version, and the one with the oldest
// leads; stop it (SIGTERM) and the next leads at once.
//
// The reconciler stamps each ConfigMap labelled cle.dev/example=true in
// --namespace with the leader's identity and fencing token, writing through
// a client that refuses writes whenever this replica is not leader. With
// --witness-url a leader runnable also reports to a witness (see
// internal/witness) every --witness-interval, with the term's token, through
// a write-guarded HTTP client.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cle "github.com/cle-dev/cle/contrib/controller-runtime"
	"github.com/cle-dev/cle/internal/witness"
	"github.com/cle-dev/cle/pkg/candidate"
)

const (
	exampleLabel    = "cle.dev/example"
	stampAnnotation = "cle.dev/example-leader"
)

var (
	witnessURL      string
	witnessInterval time.Duration
)

func main() {
	var o cle.Options
	flag.StringVar(&o.Namespace, "namespace", "default", "namespace of the Lease and of the ConfigMaps reconciled")
	flag.StringVar(&o.LeaseName, "lease", "cle-example-controller-runtime", "name of the Lease the replicas elect a leader on")
	flag.StringVar(&o.Identity, "identity", "", "this replica's identity (default: host name and a random UUID)")
	flag.StringVar(&o.BinaryVersion, "binary-version", "1.36.0", "binary version of this replica")
	flag.StringVar(&o.EmulationVersion, "emulation-version", "", "emulation version of this replica (default: binary version)")
	flag.StringVar(&o.APIMode, "api-mode", "auto", "auto, native or portable")
	flag.Func("strategy", "election strategy this replica asks for (default OldestEmulationVersion), e.g. cle.dev/OldestEmulationVersion where kube-apiserver's own election controller elects OldestEmulationVersion", func(s string) error {
		o.Strategy = coordinationv1.CoordinatedLeaseStrategy(s)
		return nil
	})
	flag.DurationVar(&o.LeaseDuration, "lease-duration", cle.DefaultLeaseDuration, "lease duration")
	flag.DurationVar(&o.RenewDeadline, "renew-deadline", cle.DefaultRenewDeadline, "renew deadline")
	flag.DurationVar(&o.RetryPeriod, "retry-period", cle.DefaultRetryPeriod, "retry period")
	flag.StringVar(&witnessURL, "witness-url", "", "if set, the leader POSTs a fenced write to this URL every --witness-interval through a write-guarded HTTP client")
	flag.DurationVar(&witnessInterval, "witness-interval", 100*time.Millisecond, "interval of the leader's writes to --witness-url")
	klog.InitFlags(nil)
	flag.Parse() // --kubeconfig is registered by controller-runtime
	ctrl.SetLogger(klog.Background())
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		klog.Background().Error(err, "Manager failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o cle.Options) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	opts := manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{o.Namespace: {}}},
	}
	// The manager's own client refuses writes unless this replica leads,
	// so a preempted replica stops writing at once, before the manager
	// notices it lost the Lease.
	o.GuardClient = true
	mgr, lk, err := cle.NewManager(cfg, opts, o)
	if err != nil {
		return err
	}
	r := &stamper{client: mgr.GetClient(), c: lk.Candidate()}
	err = builder.ControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return obj.GetLabels()[exampleLabel] == "true"
		}))).
		Complete(r)
	if err != nil {
		return err
	}
	if witnessURL != "" {
		if err := mgr.Add(reportToWitness(lk.Candidate())); err != nil {
			return err
		}
	}
	fmt.Printf("identity %s\n", lk.Identity())
	// Start hands the Lease over and withdraws the LeaseCandidate before
	// it returns.
	return mgr.Start(ctx)
}

// stamper writes the leader's identity and fencing token on ConfigMaps.
type stamper struct {
	client client.Client
	c      *candidate.External
}

func (s *stamper) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := s.client.Get(ctx, req.NamespacedName, &cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	token, ok := s.c.Token()
	if !ok {
		return reconcile.Result{}, fmt.Errorf("%s is not leader", s.c.Identity())
	}
	stamp := s.c.Identity() + " token=" + strconv.Itoa(int(token))
	if cm.Annotations[stampAnnotation] == stamp {
		return reconcile.Result{}, nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, stampAnnotation, stamp)
	err := s.client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: cm.ObjectMeta}, client.RawPatch(types.MergePatchType, []byte(patch)))
	if err == nil {
		fmt.Printf("stamped %s/%s %s\n", cm.Namespace, cm.Name, stamp)
	}
	return reconcile.Result{}, err
}

// reportToWitness is a leader runnable that writes to the witness with the
// term's token until the manager stops it.
func reportToWitness(c *candidate.External) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		hc, err := witness.Client(witnessURL, clock.RealClock{}, c.WrapConfig)
		if err != nil {
			return fmt.Errorf("witness client: %w", err)
		}
		token, _ := c.Token()
		witness.Report(ctx, hc, witnessURL, witness.Write{Identity: c.Identity(), Token: int64(token)}, witnessInterval, clock.RealClock{}, func(seq int, err error) {
			if err != nil {
				klog.FromContext(ctx).V(2).Info("Witness write failed", "token", token, "seq", seq, "err", err)
			}
		})
		return nil
	})
}
