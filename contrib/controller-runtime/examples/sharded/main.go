// Command sharded is a controller-runtime manager whose ConfigMap controller
// is sharded with cle: run several replicas with different --identity, and
// cle-controller spreads --shards shards over them; each replica reconciles
// only the ConfigMaps of its shards. Kill one and its shards go to the
// others; start one and it takes its share.
//
// The reconciler stamps each ConfigMap labelled cle.dev/example=true in
// --namespace with the replica's identity, the object's shard and the
// shard's fencing token, through a client that refuses writes unless they
// are made on the context of a shard the replica acts on. The stamp is a
// fenced write: it is an update conditional on the version read, and it is
// not made over a stamp of a higher token, so a deposed owner whose late
// write gets through the guard cannot overwrite its successor's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cle "github.com/cle-dev/cle/contrib/controller-runtime"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/shard"
)

const (
	exampleLabel    = "cle.dev/example"
	stampAnnotation = "cle.dev/example-shard"
)

func main() {
	var cfg candidate.GroupConfig
	flag.StringVar(&cfg.Namespace, "namespace", "default", "namespace of the group and of the ConfigMaps reconciled")
	flag.StringVar(&cfg.LeaseName, "group", "cle-example-sharded", "name of the shard group (its Lease)")
	flag.StringVar(&cfg.Identity, "identity", "", "this replica's identity, stable across its restarts (default: the host name and the group's)")
	flag.StringVar(&cfg.BinaryVersion, "binary-version", "1.36.0", "binary version of this replica")
	flag.StringVar(&cfg.EmulationVersion, "emulation-version", "", "emulation version of this replica (default: binary version)")
	flag.StringVar(&cfg.APIMode, "api-mode", "auto", "auto, native or portable")
	flag.IntVar(&cfg.Shards, "shards", 32, "the shard count this replica is built for")
	strategy := flag.String("strategy", shard.StrategyShardsOldestEmulationVersion, "the group's strategy: "+shard.StrategyShardsOldestEmulationVersion+" (during an upgrade only the oldest emulation version acts) or "+shard.StrategyShards)
	flag.DurationVar(&cfg.LeaseDuration, "lease-duration", candidate.DefaultLeaseDuration, "lease duration of the member Lease")
	flag.DurationVar(&cfg.RenewDeadline, "renew-deadline", candidate.DefaultRenewDeadline, "renew deadline")
	flag.DurationVar(&cfg.RetryPeriod, "retry-period", candidate.DefaultRetryPeriod, "retry period: how often the member Lease is renewed")
	klog.InitFlags(nil)
	flag.Parse() // --kubeconfig is registered by controller-runtime
	cfg.Strategy = coordinationv1.CoordinatedLeaseStrategy(*strategy)
	ctrl.SetLogger(klog.Background())
	if err := run(ctrl.SetupSignalHandler(), cfg); err != nil {
		klog.Background().Error(err, "Manager failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg candidate.GroupConfig) error {
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.RestConfig = restConfig
	// No leader election: every replica runs the controller, on its shards.
	mgr, err := manager.New(restConfig, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{cfg.Namespace: {}}},
	})
	if err != nil {
		return err
	}
	shards, err := cle.NewShards(cfg)
	if err != nil {
		return err
	}
	if err := mgr.Add(shards); err != nil {
		return err
	}
	guarded, err := client.New(shards.Group().WrapConfig(restConfig), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return err
	}
	s := &stamper{identity: shards.Group().Identity(), reader: mgr.GetClient(), writer: guarded}
	err = builder.ControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(shards.Predicate(), predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return obj.GetLabels()[exampleLabel] == "true"
		}))).
		WatchesRawSource(shards.Source(mgr.GetCache(), &corev1.ConfigMapList{})).
		Complete(shards.Reconciler(s))
	if err != nil {
		return err
	}
	fmt.Printf("identity %s\n", shards.Group().Identity())
	// Start stops every shard, waits for its reconciles, deletes the
	// LeaseCandidate and releases the member Lease before it returns.
	return mgr.Start(ctx)
}

// stamper writes the replica's identity, the object's shard and its token on
// the ConfigMaps of the shards it acts on.
type stamper struct {
	identity string
	reader   client.Client
	writer   client.Client
}

func (s *stamper) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	sh, ok := candidate.ShardFrom(ctx)
	if !ok {
		return reconcile.Result{}, fmt.Errorf("%s reconciled outside a shard's context", req)
	}
	var cm corev1.ConfigMap
	if err := s.reader.Get(ctx, req.NamespacedName, &cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Labels[exampleLabel] != "true" {
		return reconcile.Result{}, nil
	}
	stamp := Stamp{Identity: s.identity, Shard: sh.Index, Token: sh.Token}
	old, _ := ParseStamp(cm.Annotations[stampAnnotation])
	if old == stamp {
		return reconcile.Result{}, nil
	}
	if old.Shard == sh.Index && old.Token > sh.Token {
		// A newer grant of the shard has written: this replica's grant is
		// over, whatever it believes.
		klog.FromContext(ctx).Info("Not stamping over a newer grant", "configMap", req, "stamp", old.String(), "token", sh.Token)
		return reconcile.Result{}, nil
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[stampAnnotation] = stamp.String()
	// Conditional on the version read: a stamp written since is not
	// overwritten unseen.
	if err := s.writer.Update(ctx, &cm); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, err
	}
	fmt.Printf("stamped %s %s\n", req, stamp)
	return reconcile.Result{}, nil
}

// Stamp is what the example writes on a ConfigMap.
type Stamp struct {
	Identity string
	Shard    int
	Token    int64
}

func (s Stamp) String() string {
	return fmt.Sprintf("%s shard=%d token=%d", s.Identity, s.Shard, s.Token)
}

// ParseStamp reads a stamp; ok is false for anything else.
func ParseStamp(text string) (s Stamp, ok bool) {
	fields := strings.Fields(text)
	if len(fields) != 3 {
		return Stamp{}, false
	}
	shardText, ok1 := strings.CutPrefix(fields[1], "shard=")
	tokenText, ok2 := strings.CutPrefix(fields[2], "token=")
	index, err1 := strconv.Atoi(shardText)
	token, err2 := strconv.ParseInt(tokenText, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return Stamp{}, false
	}
	return Stamp{Identity: fields[0], Shard: index, Token: token}, true
}
