package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// The candidate garbage collector deletes LeaseCandidates that have not
// renewed for the candidate TTL by local observation, and those that did not
// answer a ping sooner: once they have not renewed for the unresponsive
// candidate TTL. Each candidate is queued to be looked at when its TTL would
// run out; a renewal pushes that back.
//
// The second rule is what keeps a LeaseCandidate left behind by a process
// that exited without deleting it (a crash, SIGKILL, an os.Exit that skipped
// the shutdown) from costing later elections anything: the first election or
// preemption check that finds it pings it once, and once it is deleted no
// later election, and no controller of a later leadership term (which would
// not remember that it went unanswered), waits for it again. The TTL (10m) is
// twice the renew interval of pkg/candidate and of client-go's LeaseCandidate
// (5m), so a live candidate whose answers are slow (an overloaded server, a
// pause) renews before it and is not deleted; one deleted all the same loses
// nothing, as it was excluded until it wrote again anyway, and both create
// their LeaseCandidate again when a renewal finds it gone.

func (c *Controller) runGCWorker(ctx context.Context) {
	for c.processNextGC(ctx) {
	}
}

func (c *Controller) processNextGC(ctx context.Context) bool {
	key, quit := c.gcQueue.Get()
	if quit {
		return false
	}
	defer c.gcQueue.Done(key)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "candidate", klog.KRef(key.Namespace, key.Name))
	requeue, err := c.collect(klog.NewContext(ctx, logger), key)
	if err != nil {
		logger.Error(err, "Candidate garbage collection failed; retrying")
		c.gcQueue.AddRateLimited(key)
		return true
	}
	c.gcQueue.Forget(key)
	if requeue > 0 {
		c.gcQueue.AddAfter(key, requeue)
	}
	return true
}

// candidateExpired is the state of cle_candidates for candidates past
// gcDeadline that are not deleted yet: garbage.
const candidateExpired = "expired"

// gcDeadline is when a candidate is deleted unless it renews: the candidate
// TTL after its last renewal, or the shorter unresponsive TTL once it
// failed to answer a ping.
func (c *Controller) gcDeadline(rec *candidateRecord) time.Time {
	expiry := rec.lastRenewal().Add(c.opts.CandidateTTL)
	if rec.unresponsive {
		if at := rec.lastRenewal().Add(c.opts.UnresponsiveCandidateTTL); at.Before(expiry) {
			expiry = at
		}
	}
	return expiry
}

// collect deletes the candidate if it has not renewed for the TTL. Before
// deleting it re-reads the candidate from the server, and deletes only if the
// server's copy is the one judged (same UID and renewTime), with UID and
// resourceVersion preconditions, so a renewal racing with the delete wins.
func (c *Controller) collect(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	now := c.opts.Clock.Now()
	cached := c.cachedCandidate(key)
	if cached == nil {
		return 0, nil
	}
	rec := c.obs.candidate(cached, now)
	expiry := c.gcDeadline(&rec)
	why := "not renewed for the candidate TTL"
	if rec.unresponsive && expiry.Before(rec.lastRenewal().Add(c.opts.CandidateTTL)) {
		why = "did not answer a ping"
	}
	if now.Before(expiry) {
		return expiry.Sub(now), nil
	}
	client := c.access.LeaseCandidates(key.Namespace)
	current, err := client.Get(ctx, key.Name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("re-read candidate before deleting it: %w", err)
	}
	if current.UID != rec.uid || !renewTimeOf(current).Equal(rec.renewTime) {
		// It changed after what the cache showed: the informer will deliver
		// the change and reschedule it.
		return 0, nil
	}
	err = client.Delete(ctx, key.Name, &metav1.Preconditions{UID: &current.UID, ResourceVersion: &current.ResourceVersion})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Deleted expired candidate", "lease", current.Spec.LeaseName, "reason", why, "notRenewedFor", now.Sub(rec.lastRenewal()))
		return 0, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return 0, nil // gone, or renewed meanwhile
	default:
		return 0, fmt.Errorf("delete expired candidate: %w", err)
	}
}
