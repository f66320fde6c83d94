package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestElectionRetriesAreBounded: a Lease whose election steps failed many
// times in a row (through an API outage) is retried within
// maxElectionRetry once the API answers, not after client-go's default of
// up to 1000 s; a collection that keeps failing still backs off further.
func TestElectionRetriesAreBounded(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "lease"}
	election, gc := electionRetries(), gcRetries()
	var last, lastGC time.Duration
	for range 40 {
		last, lastGC = election.When(key), gc.When(key)
	}
	if last > maxElectionRetry || maxElectionRetry > 5*time.Second {
		t.Errorf("after 40 failed steps the next is in %s, want at most %s (and that at most 5s)", last, maxElectionRetry)
	}
	if lastGC < time.Minute {
		t.Errorf("after 40 failed collections the next is in %s, want the backoff to keep growing", lastGC)
	}
	election.Forget(key)
	if d := election.When(key); d != 5*time.Millisecond {
		t.Errorf("after Forget the next retry is in %s, want 5ms", d)
	}
}
