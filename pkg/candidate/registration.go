package candidate

import (
	"context"
	"maps"
	"strconv"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/internal/nudge"
	"github.com/cle-dev/cle/pkg/access"
)

// registrar keeps this process's LeaseCandidate registered, current and
// renewed, and answers pings. Its fields belong to the goroutine running run.
type registrar struct {
	c      *Candidate
	client access.CandidateClient
	watched[*coordinationv1beta1.LeaseCandidate]
	wake chan struct{}
	// writer is the user name recorded in access.WriterAnnotation; empty
	// when unknown, and then the annotation is left as it is.
	writer string
	// seen is what leaseTransitions the elector has seen the Lease carry;
	// with the tokens held (Candidate.held) it makes the highest token
	// recorded in access.HighestTokenAnnotation.
	seen *lead.SeenTerms

	// renewedAt is when this process last wrote its candidate, on its own
	// clock; zero until the first write of this run, so a restart always
	// refreshes the object.
	renewedAt time.Time
	retryAt   time.Time
	created   bool
}

func newRegistrar(c *Candidate, acc access.Interface, writer string) *registrar {
	r := &registrar{
		c:      c,
		writer: writer,
		client: acc.LeaseCandidates(c.cfg.Namespace),
		watched: watched[*coordinationv1beta1.LeaseCandidate]{
			informer: acc.NewCandidateInformer(c.cfg.Namespace, 0, oneObject(c.cfg.Identity)),
			key:      c.cfg.Namespace + "/" + c.cfg.Identity,
		},
		wake: make(chan struct{}, 1),
	}
	// The registration cannot fail on an informer that has not started.
	handle, _ := r.informer.AddEventHandler(wakeOnChange(r.wake))
	r.synced = handle.HasSyncedChecker()
	return r
}

func (r *registrar) run(ctx context.Context) {
	timer := r.c.cfg.Clock.NewTimer(r.step(ctx))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C():
		}
		if ctx.Err() == nil {
			timer.Reset(r.step(ctx))
		}
	}
}

// step brings the LeaseCandidate to what it should be now and returns when
// to look again. Each write has the renew deadline as its timeout, so a hung
// API call cannot keep pings unanswered for long.
func (r *registrar) step(ctx context.Context) time.Duration {
	cfg := &r.c.cfg
	logger := klog.FromContext(ctx)
	now := cfg.Clock.Now()
	if now.Before(r.retryAt) {
		return lead.UntilNext(now, r.retryAt)
	}
	storeRV := ""
	if stored, ok := r.stored(); ok {
		storeRV = stored.ResourceVersion
	}
	lc := r.current()
	reqCtx, cancel := r.c.withTimeout(ctx, cfg.RenewDeadline)
	defer cancel()
	var (
		written *coordinationv1beta1.LeaseCandidate
		err     error
		what    string
	)
	switch {
	case lc != nil && lc.Spec.LeaseName != cfg.LeaseName:
		// Another component, registered under the same Identity since this
		// one started, owns the object: never rewrite it (the API refuses a
		// new leaseName anyway). Said loudly, and looked at again later.
		logger.Error(identityInUse(lc, cfg), "Not registering: this candidate's Identity is taken", "retryIn", identityTakenRetry)
		return identityTakenRetry
	case lc == nil:
		if r.created {
			logger.Info("LeaseCandidate was deleted; creating it again")
		}
		what = "create"
		created := &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Identity},
			Spec:       r.spec(coordinationv1beta1.LeaseCandidateSpec{}, now),
		}
		r.annotate(&created.ObjectMeta)
		written, err = r.client.Create(reqCtx, created)
		if apierrors.IsAlreadyExists(err) {
			// The informer has not caught up yet; its event wakes us.
			return cfg.RetryPeriod
		}
	case r.pinged(lc) && cfg.nudge.At(nudge.PingAnsweredLate):
		return cfg.RetryPeriod
	case r.pinged(lc):
		what = "answer ping"
		renew := now
		if ping := lc.Spec.PingTime.Time; renew.Before(ping) {
			// A controller comparing clocks must see the answer as later
			// than its ping even if our clock is behind its.
			renew = ping
		}
		written, err = r.update(reqCtx, lc, renew)
	case r.outdated(lc):
		what = "update"
		written, err = r.update(reqCtx, lc, now)
	case r.renewedAt.IsZero() || !now.Before(r.renewedAt.Add(cfg.CandidateRenewInterval)) ||
		(r.renewedAt.Before(now) && cfg.nudge.At(nudge.CandidateRenewsEarly)):
		what = "renew"
		written, err = r.update(reqCtx, lc, now)
	default:
		return lead.UntilNext(now, r.renewedAt.Add(cfg.CandidateRenewInterval))
	}
	if err != nil {
		switch {
		case isConflictOrGone(err):
			// The object changed under us; the informer brings the change
			// and wakes us, at once, so that a ping that caused the conflict
			// is answered without delay. The timer retries otherwise.
			logger.V(4).Info("LeaseCandidate changed during write; waiting for the new version", "op", what, "err", err)
			return cfg.RetryPeriod
		case ctx.Err() != nil:
			// Shutting down: the write was cut short on purpose.
			logger.V(4).Info("Writing the LeaseCandidate stopped by shutdown", "op", what, "err", err)
		default:
			logger.Error(err, "Writing the LeaseCandidate failed; retrying", "op", what, "retryPeriod", cfg.RetryPeriod)
		}
		r.retryAt = cfg.Clock.Now().Add(cfg.RetryPeriod)
		return cfg.RetryPeriod
	}
	r.written.Remember(storeRV, written)
	r.renewedAt, r.retryAt, r.created = now, time.Time{}, true
	logger.V(4).Info("Wrote LeaseCandidate", "op", what)
	if what == "create" {
		// The informer's event of the creation wakes nobody when it never
		// comes: created while the watch was down and deleted before the
		// informer listed again, the object leaves no trace in its store
		// and no deletion is delivered. Look again once the watch should
		// have shown it: a store without it then means create again (or
		// AlreadyExists, the store behind).
		return min(cfg.CandidateRenewInterval, cfg.RenewDeadline)
	}
	return cfg.CandidateRenewInterval
}

// identityTakenRetry is how often a candidate whose Identity names another
// Lease's LeaseCandidate looks again and says so.
const identityTakenRetry = 30 * time.Second

// spec is the desired spec written at renew, keeping a pending ping. Its
// renewTime is never older than the stored one (see renewTimeFor): a
// controller whose clock is ahead of this process's by more than the renew
// interval would otherwise see each periodic renewal undo its answered ping,
// and get every ping answered twice.
func (r *registrar) spec(old coordinationv1beta1.LeaseCandidateSpec, renew time.Time) coordinationv1beta1.LeaseCandidateSpec {
	cfg := &r.c.cfg
	var stored time.Time
	if old.RenewTime != nil {
		stored = old.RenewTime.Time
	}
	old.LeaseName = cfg.LeaseName
	old.BinaryVersion = cfg.BinaryVersion
	old.EmulationVersion = cfg.EmulationVersion
	old.Strategy = cfg.Strategy
	old.RenewTime = ptr.To(metav1.NewMicroTime(lead.RenewTimeFor(renew, stored)))
	return old
}

func (r *registrar) update(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate, renew time.Time) (*coordinationv1beta1.LeaseCandidate, error) {
	clone := lc.DeepCopy()
	clone.Spec = r.spec(clone.Spec, renew)
	r.annotate(&clone.ObjectMeta)
	return r.client.Update(ctx, clone)
}

// annotate records in m the writer's user name, when known, the process
// instance and Pod of the proof of death, when there is one, and the highest
// token the candidate held or saw.
func (r *registrar) annotate(m *metav1.ObjectMeta) {
	wanted := r.annotations()
	if highest := r.highestToken(m.Annotations); highest > 0 {
		wanted[access.HighestTokenAnnotation] = strconv.FormatInt(int64(highest), 10)
	}
	for key, want := range wanted {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		if want == "" {
			delete(m.Annotations, key)
		} else {
			m.Annotations[key] = want
		}
	}
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
}

// highestToken is the highest token to record beside annotations, the
// candidate's as stored: what it records already (perhaps by an earlier
// process), the highest token a term of this process had, and the highest
// the elector saw the Lease carry.
func (r *registrar) highestToken(annotations map[string]string) int32 {
	highest := max(access.HighestToken(annotations), r.c.held.Load())
	if r.seen != nil {
		highest = max(highest, r.seen.Max())
	}
	return highest
}

// annotations are what annotate writes: an empty value removes the
// annotation. The writer's is left as it is when unknown; an instance, Pod
// and container left by an earlier process are removed, since they would
// name a process that is not this one.
func (r *registrar) annotations() map[string]string {
	want := map[string]string{access.InstanceAnnotation: r.c.process.Instance, access.PodAnnotation: r.c.process.Pod,
		access.ContainerAnnotation: r.c.process.Container}
	if r.writer != "" {
		want[access.WriterAnnotation] = r.writer
	}
	maps.Copy(want, r.c.annotations)
	return want
}

// pinged reports a ping not answered yet: a pingTime later than renewTime.
func (r *registrar) pinged(lc *coordinationv1beta1.LeaseCandidate) bool {
	ping := lc.Spec.PingTime
	return ping != nil && (lc.Spec.RenewTime == nil || lc.Spec.RenewTime.Before(ping))
}

// outdated reports a candidate that does not say what this process is (e.g.
// it restarted with new versions, or runs as another user or process
// instance, or somebody edited it), or not yet the token of a term this
// process started.
func (r *registrar) outdated(lc *coordinationv1beta1.LeaseCandidate) bool {
	cfg := &r.c.cfg
	s := lc.Spec
	if s.LeaseName != cfg.LeaseName || s.BinaryVersion != cfg.BinaryVersion ||
		s.EmulationVersion != cfg.EmulationVersion || s.Strategy != cfg.Strategy || s.RenewTime == nil {
		return true
	}
	for key, want := range r.annotations() {
		if lc.Annotations[key] != want {
			return true
		}
	}
	// A token this process held is recorded at once; one it only saw goes
	// with the next write it makes anyway.
	return r.c.held.Load() > access.HighestToken(lc.Annotations)
}

// delete removes the LeaseCandidate, conditional on its UID so that a
// successor's object of the same name is never deleted. It has the renew
// deadline as its own timeout.
func (r *registrar) delete(ctx context.Context) {
	logger := klog.FromContext(ctx)
	lc := r.current()
	if lc == nil {
		return
	}
	ctx, cancel := r.c.withTimeout(ctx, r.c.cfg.RenewDeadline)
	defer cancel()
	err := r.client.Delete(ctx, lc.Name, &metav1.Preconditions{UID: ptr.To(lc.UID)})
	switch {
	case err == nil:
		logger.V(2).Info("Deleted LeaseCandidate")
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
	default:
		logger.Error(err, "Deleting the LeaseCandidate failed; the controller will garbage-collect it")
	}
}
