package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/test/integration/framework"
)

const (
	shardedNamespace = "cle-sharded"
	shardedGroup     = "sharded"
	shardedStamp     = "cle.dev/example-shard"
	shardedLabel     = "cle.dev/example"
)

// TestShardedExampleOnNode runs contrib's sharded controller
// (examples/sharded) as a StatefulSet of three replicas over 32 shards and
// 64 ConfigMaps, under cle-controller installed by the chart: every ConfigMap
// ends stamped by its shard's owner; a replica whose container is killed
// with SIGKILL comes back under its identity in a new epoch and gets its
// share back; a rolling upgrade of the emulation version hands every shard
// to the new version's replicas. A watch of every stamp throughout finds no
// token going down on an object and no two replicas stamping under one
// grant.
func TestShardedExampleOnNode(t *testing.T) {
	n := cluster
	helm := toolFromEnv(t, helmEnv)
	n.installChart(t, helm, n.publishedChart(t))
	n.kubectl(t, strings.ReplaceAll(candsRBAC, "NS", shardedNamespace)+"\n---\n"+strings.ReplaceAll(shardedRBAC, "NS", shardedNamespace), "apply", "-f", "-")
	t.Cleanup(func() {
		n.kubectl(t, "", "delete", "namespace", shardedNamespace, "--ignore-not-found", "--wait=true", "--timeout=3m")
	})
	ctx := context.Background()
	const objects, count = 64, 32
	for i := range objects {
		_, err := n.client.CoreV1().ConfigMaps(shardedNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("object-%d", i), Labels: map[string]string{shardedLabel: "true"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	w := watchStamps(t, n)

	n.kubectl(t, strings.NewReplacer("VERSION", "1.36.0", "COUNT", strconv.Itoa(count)).Replace(shardedStatefulSet), "apply", "-f", "-")
	n.waitStatefulSetReady(t, "1.36.0")
	n.waitStampedByOwners(t, objects, "first assignment")

	// SIGKILL: the kubelet restarts the container in the same Pod, under
	// the same identity; the new process joins in a new epoch.
	killed := "sharded-1"
	if _, err := n.ctrRun(ctx, "task", "kill", "--signal", "SIGKILL", n.containerID(t, shardedNamespace, killed)); err != nil {
		t.Fatal(err)
	}
	n.waitStampedByOwners(t, objects, "after "+killed+" was killed", func(g shard.Group) bool {
		for _, o := range g.Owners {
			if o.Member == killed && o.Epoch >= 2 {
				return true
			}
		}
		return false
	})

	// A rolling upgrade of the emulation version: replicas of 1.37 wait as
	// standbys while one of 1.36 is live, then take every shard.
	n.kubectl(t, strings.NewReplacer("VERSION", "1.37.0", "COUNT", strconv.Itoa(count)).Replace(shardedStatefulSet), "apply", "-f", "-")
	n.waitStatefulSetReady(t, "1.37.0")
	n.waitStampedByOwners(t, objects, "after the rolling upgrade")
	w.stop(t)
}

// stampWatch watches the stamps of the example's ConfigMaps.
type stampWatch struct {
	w    watch.Interface
	done chan struct{}
	framework.ShardStamps
}

func watchStamps(t *testing.T, n *node) *stampWatch {
	t.Helper()
	wi, err := n.client.CoreV1().ConfigMaps(shardedNamespace).Watch(context.Background(), metav1.ListOptions{LabelSelector: shardedLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	s := &stampWatch{w: wi, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ev := range wi.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
				s.See(cm.Name, cm.Annotations[shardedStamp])
			}
		}
	}()
	t.Cleanup(wi.Stop)
	return s
}

func (s *stampWatch) stop(t *testing.T) {
	t.Helper()
	s.w.Stop()
	<-s.done
	stamps, problems := s.Result()
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("the witness saw %d stamps", stamps)
}

// waitStatefulSetReady waits until every replica of the example runs the
// version and is Ready.
func (n *node) waitStatefulSetReady(t *testing.T, version string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := n.client.AppsV1().StatefulSets(shardedNamespace).Get(ctx, "sharded", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%+v", s.Status)
		return statefulSetRolledOut(s) && strings.Contains(strings.Join(s.Spec.Template.Spec.Containers[0].Args, " "), "--emulation-version="+version), nil
	})
	if err != nil {
		t.Fatalf("StatefulSet sharded at %s not ready: %v (last: %s)", version, err, last)
	}
}

func statefulSetRolledOut(s *appsv1.StatefulSet) bool {
	want := *s.Spec.Replicas
	st := s.Status
	return st.ObservedGeneration == s.Generation && st.ReadyReplicas == want && st.UpdatedReplicas == want &&
		st.CurrentRevision == st.UpdateRevision
}

// waitStampedByOwners waits until the group is balanced over the three
// replicas, every ConfigMap stamped by its shard's owner under the grant's
// token, and more holds.
func (n *node) waitStampedByOwners(t *testing.T, objects int, what string, more ...func(shard.Group) bool) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := n.client.CoordinationV1().Leases(shardedNamespace).Get(ctx, shardedGroup, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		g, err := shard.ParseGroup(lease.Annotations)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ok, why := framework.GroupBalanced(g, "sharded-0", "sharded-1", "sharded-2")
		if !ok {
			last = "group " + why
			return false, nil
		}
		for _, f := range more {
			if !f(g) {
				last = "group " + g.DescribeOwners()
				return false, nil
			}
		}
		list, err := n.client.CoreV1().ConfigMaps(shardedNamespace).List(ctx, metav1.ListOptions{LabelSelector: shardedLabel + "=true"})
		if err != nil || len(list.Items) != objects {
			last = fmt.Sprintf("ConfigMaps: %v", err)
			return false, nil
		}
		ok, last = framework.StampedByOwners(g, shardedNamespace, shardedStamp, list.Items)
		return ok, nil
	})
	if err != nil {
		for i := range 3 {
			lines, err := n.podLog(context.Background(), shardedNamespace, fmt.Sprintf("sharded-%d", i), false)
			t.Logf("---- sharded-%d (%v) ----\n%s", i, err, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
		t.Log(n.kubectl(t, "", "get", "pods,leases", "-n", shardedNamespace, "-o", "wide"))
		t.Fatalf("%s: not stamped by the owners: %v (last: %s)", what, err, last)
	}
}

// shardedRBAC adds to candsRBAC what a replica of the sharded example
// needs: to create its member Lease and to stamp ConfigMaps.
const shardedRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: sharded
  namespace: NS
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: sharded
  namespace: NS
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sharded}
subjects:
  - {kind: ServiceAccount, name: cand, namespace: NS}
`

// shardedStatefulSet runs three replicas of the example at VERSION (binary
// and emulation), each named by its Pod: a restarted container is the same
// replica.
const shardedStatefulSet = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: sharded
  namespace: cle-sharded
spec:
  replicas: 3
  serviceName: sharded
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app: sharded}
  template:
    metadata:
      labels: {app: sharded}
    spec:
      serviceAccountName: cand
      terminationGracePeriodSeconds: 15
      containers:
        - name: sharded
          image: ` + shardedImage + `
          imagePullPolicy: Never
          args: ["--namespace=$(POD_NAMESPACE)", "--group=sharded", "--identity=$(POD_NAME)", "--shards=COUNT",
            "--binary-version=VERSION", "--emulation-version=VERSION", "--api-mode=portable", "-v=2"]
          env:
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
`
