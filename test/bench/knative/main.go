// Command knative is the Knative side of the shard benchmark (test/bench
// BenchmarkShards): one replica of a component whose work is split into
// buckets by knative.dev/pkg/leaderelection, as Knative's controllers split
// theirs. Every replica runs client-go's LeaderElector on each bucket's Lease
// (<component>.<queue>.NN-of-MM in --namespace), and acts on the buckets it
// holds, from Promote to Demote.
//
// It prints the lines the cle side's replicas (test/bench/cand --shards)
// print, with the wall-clock time in Unix nanoseconds:
//
//	started-shard identity=<id> shard=<i> token=0 at=<ns>
//	stopped-shard identity=<id> shard=<i> token=0 at=<ns>
//
// SIGTERM or SIGINT stops it as a Knative controller stops: every elector's
// context ends, each bucket's Lease is released, and the bucket is demoted.
//
// It is a module of its own: knative.dev/pkg pins an older client-go than
// cle's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/pkg/leaderelection"
	"knative.dev/pkg/reconciler"
	"knative.dev/pkg/system"
)

// queue is the reconciler queue the buckets are named after.
const queue = "bench"

func main() {
	var (
		kubeconfig, namespace, component, identity string
		buckets                                    uint
		leaseDuration, renewDeadline, retryPeriod  time.Duration
		qps                                        float64
	)
	fs := flag.NewFlagSet("knative", flag.ContinueOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "path to a kubeconfig")
	fs.StringVar(&namespace, "namespace", "default", "namespace of the buckets' Leases")
	fs.StringVar(&component, "lease", "", "the component, which names the buckets (required)")
	fs.StringVar(&identity, "identity", "", "this replica's identity (required)")
	fs.UintVar(&buckets, "shards", 32, "bucket count")
	fs.DurationVar(&leaseDuration, "lease-duration", 15*time.Second, "lease duration")
	fs.DurationVar(&renewDeadline, "renew-deadline", 10*time.Second, "renew deadline")
	fs.DurationVar(&retryPeriod, "retry-period", 2*time.Second, "retry period")
	fs.Float64Var(&qps, "kube-api-qps", -1, "the client's rate limit in requests a second (burst: twice as many); negative: none. Each bucket costs a request every retry period, two while held, which client-go's default of 5 cannot carry for 32 buckets: renewals wait, run past the renew deadline, and buckets flap")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if component == "" || identity == "" || buckets == 0 {
		fmt.Fprintln(os.Stderr, "knative: --lease, --identity and a positive --shards are required")
		os.Exit(2)
	}
	if err := run(kubeconfig, namespace, component, identity, uint32(buckets), leaseDuration, renewDeadline, retryPeriod, qps); err != nil {
		fmt.Fprintln(os.Stderr, "knative:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, component, identity string, buckets uint32, ld, rd, rp time.Duration, qps float64) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "cle-bench-knative/" + identity
	cfg.QPS, cfg.Burst = float32(qps), int(2*qps)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The buckets' Leases are in the namespace Knative runs in.
	if err := os.Setenv(system.NamespaceEnvKey, namespace); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = leaderelection.WithStandardLeaderElectorBuilder(ctx, client, leaderelection.ComponentConfig{
		Component: component, Buckets: buckets, Identity: identity,
		LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp,
	})
	var out sync.Mutex
	say := func(event string, b reconciler.Bucket) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf("%s identity=%s shard=%d token=0 at=%d\n", event, identity, index(b.Name()), time.Now().UnixNano())
	}
	la := &reconciler.LeaderAwareFuncs{
		PromoteFunc: func(b reconciler.Bucket, _ func(reconciler.Bucket, types.NamespacedName)) error {
			say("started-shard", b)
			return nil
		},
		DemoteFunc: func(b reconciler.Bucket) { say("stopped-shard", b) },
	}
	// A controller's enqueue function: Promote is called only with one.
	enq := func(reconciler.Bucket, types.NamespacedName) {}
	el, err := leaderelection.BuildElector(ctx, la, queue, enq)
	if err != nil {
		return fmt.Errorf("build elector: %w", err)
	}
	el.Run(ctx)
	return nil
}

// index is the ordinal in a bucket's name, <prefix>.NN-of-MM.
func index(name string) int {
	n, _, _ := strings.Cut(name[strings.LastIndex(name, ".")+1:], "-of-")
	i, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return i
}
