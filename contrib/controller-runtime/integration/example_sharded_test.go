package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

const (
	exampleLabel    = "cle.dev/example"
	stampAnnotation = "cle.dev/example-shard"
)

// TestShardedExample runs the sharded example (examples/sharded) as three
// processes over 32 shards and 64 ConfigMaps: every ConfigMap is stamped by
// its shard's owner; a replica killed with SIGKILL has its shards stamped by
// the others once its member Lease expired; started again under its
// identity it joins in a new epoch and takes its share back. A watch of
// every stamp finds no token going down on an object and no two replicas
// stamping under one grant.
func TestShardedExample(t *testing.T) {
	for _, e := range envs {
		if !e.cleController {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			const group, count, objects = "sharded", 32, 64
			ns := e.setup(t)
			bin := framework.BuildCommand(t, "github.com/cle-dev/cle/contrib/controller-runtime/examples/sharded")
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			if err := e.s.WriteUserKubeconfig(kubeconfig, framework.AdminUser); err != nil {
				t.Fatal(err)
			}
			client := e.s.Client()
			for i := range objects {
				_, err := client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("object-%d", i), Labels: map[string]string{exampleLabel: "true"}}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			}
			var w framework.ShardStamps
			watcher, err := client.CoreV1().ConfigMaps(ns).Watch(context.Background(), metav1.ListOptions{LabelSelector: exampleLabel + "=true"})
			if err != nil {
				t.Fatal(err)
			}
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for ev := range watcher.ResultChan() {
					if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Modified {
						w.See(cm.Name, cm.Annotations[stampAnnotation])
					}
				}
			}()
			defer func() {
				watcher.Stop()
				<-watched
				stamps, problems := w.Result()
				for _, p := range problems {
					t.Error(p)
				}
				t.Logf("the witness saw %d stamps", stamps)
			}()

			start := func(id string) *framework.Child {
				return framework.StartChild(t, id, bin, "--kubeconfig="+kubeconfig, "--namespace="+ns, "--group="+group,
					"--identity="+id, "--shards="+strconv.Itoa(count), "--api-mode="+e.apiMode, "--strategy="+shard.StrategyShards,
					"--lease-duration=3s", "--renew-deadline=2s", "--retry-period=500ms", "-v=2")
			}
			stamped := func(what string, owners ...string) {
				t.Helper()
				var last string
				err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitLong, true, func(ctx context.Context) (bool, error) {
					ok, why := e.stampedByOwners(ctx, ns, group, objects, owners...)
					last = why
					return ok, nil
				})
				if err != nil {
					t.Fatalf("%s: not within %s (last: %s)", what, waitLong, last)
				}
			}
			start("r-a")
			b := start("r-b")
			start("r-c")
			stamped("every ConfigMap stamped by its shard's owner", "r-a", "r-b", "r-c")

			if err := b.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			stamped("r-b's ConfigMaps stamped by the others", "r-a", "r-c")

			start("r-b")
			stamped("r-b back with its share", "r-a", "r-b", "r-c")
		})
	}
}

// stampedByOwners reports whether the group Lease is balanced over owners
// and every ConfigMap carries the stamp of its shard's owner under that
// grant's token.
func (e *env) stampedByOwners(ctx context.Context, ns, group string, n int, owners ...string) (bool, string) {
	lease, err := e.s.Client().CoordinationV1().Leases(ns).Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	g, err := shard.ParseGroup(lease.Annotations)
	if err != nil {
		return false, err.Error()
	}
	if ok, why := framework.GroupBalanced(g, owners...); !ok {
		return false, why
	}
	list, err := e.s.Client().CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: exampleLabel + "=true"})
	if err != nil {
		return false, err.Error()
	}
	if len(list.Items) != n {
		return false, fmt.Sprintf("%d ConfigMaps", len(list.Items))
	}
	return framework.StampedByOwners(g, ns, stampAnnotation, list.Items)
}
