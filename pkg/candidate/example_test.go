package candidate_test

import (
	"context"
	"log"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cle-dev/cle/pkg/candidate"
)

// A component takes part in the election of its Lease, and its leader work
// writes only while it leads: on the context OnStartedLeading gives it,
// through a client that refuses requests whenever this process is not
// leader, stamping what it writes with the term's fencing token.
func ExampleNew() {
	ctx := context.Background()
	restConfig, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	var c *candidate.Candidate
	c, err = candidate.New(candidate.Config{
		RestConfig:       restConfig,
		Namespace:        "kube-system",
		LeaseName:        "my-controller",
		BinaryVersion:    "1.36.0",
		EmulationVersion: "1.35.0",
		Callbacks: candidate.Callbacks{
			// Runs while this process leads; must return soon after
			// ctx is done (the next leader waits for it).
			OnStartedLeading: func(ctx context.Context) {
				token, _ := candidate.TokenFrom(ctx)
				writer := kubernetes.NewForConfigOrDie(c.WrapConfig(restConfig))
				for ctx.Err() == nil {
					cm := &corev1.ConfigMap{
						ObjectMeta: metav1.ObjectMeta{Name: "my-controller-state"},
						Data:       map[string]string{"token": strconv.Itoa(int(token))},
					}
					if _, err := writer.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
						log.Print(err) // refused once the term ends
					}
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Second):
					}
				}
			},
		},
	})
	if err != nil {
		log.Fatal(err) // wraps candidate.ErrInvalidConfig
	}
	// Blocks until ctx is done; then stops leader work, hands over or
	// releases the Lease, and deletes the LeaseCandidate.
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
