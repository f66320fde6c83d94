package fence_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/fence"
)

// Leader work stamps each object it writes with its own term's token; with
// the policy of `kubectl cle fence LEASE --by-token` applied, kube-apiserver
// refuses the update of a leader that was deposed once its successor wrote.
func ExampleStamp() {
	leaderWork := func(ctx context.Context, client kubernetes.Interface) error {
		token, _ := candidate.TokenFrom(ctx)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "state"}, Data: map[string]string{"step": "2"}}
		fence.Stamp(cm, token)
		_, err := client.CoreV1().ConfigMaps("team-a").Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}
	_ = leaderWork

	cm := &corev1.ConfigMap{}
	fence.Stamp(cm, 7)
	fmt.Println(cm.Annotations[fence.TokenAnnotation])
	// Output: 7
}

// The policy and binding that let only the Lease's holder's Pod make the
// leader's writes, as kubectl cle fence prints them.
func ExampleObjects() {
	policy, binding, err := fence.Objects(fence.Election{
		Namespace: "team-a", Lease: "my-controller", ServiceAccount: "my-controller",
		Rules: []fence.Rule{{Group: "apps", Resource: "deployments", Verbs: []string{"create", "update", "patch", "delete"}}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(policy.Name, binding.Spec.ParamRef.Namespace+"/"+binding.Spec.ParamRef.Name)
	// Output: cle-fence.team-a.my-controller team-a/my-controller
}
