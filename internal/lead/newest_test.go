package lead

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func leaseAt(rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: rv}}
}

// TestNewestOverALaggingStore: a process creates an object and writes it
// again before its store shows the creation; the creation, once the store
// shows it, is older than the last write and is not served.
func TestNewestOverALaggingStore(t *testing.T) {
	var n Newest[*coordinationv1.Lease]
	n.Remember("", leaseAt("1")) // created while the store had nothing
	if got, ok := n.Pick(nil, false); ok || got != nil {
		t.Fatalf("store without the object: Pick = %v, %v; want it absent, as the store says", got, ok)
	}
	n.Remember("", leaseAt("2")) // written again; the store still shows nothing
	if got, _ := n.Pick(leaseAt("1"), true); got.ResourceVersion != "2" {
		t.Errorf("store showing the creation: Pick = rv %s, want the later write, 2", got.ResourceVersion)
	}
	if got, _ := n.Pick(leaseAt("2"), true); got.ResourceVersion != "2" {
		t.Errorf("store caught up: Pick = rv %s, want 2", got.ResourceVersion)
	}
	// Caught up: the write is forgotten, and the store's next version
	// (another writer's) is served.
	if got, _ := n.Pick(leaseAt("3"), true); got.ResourceVersion != "3" {
		t.Errorf("store moved on: Pick = rv %s, want 3", got.ResourceVersion)
	}
	if got, _ := n.Pick(leaseAt("1"), true); got.ResourceVersion != "1" {
		t.Errorf("after the write was forgotten: Pick = rv %s, want what the store shows", got.ResourceVersion)
	}
}
