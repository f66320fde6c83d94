package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// DefaultTokenBoundName is the Lease, in the namespace of the controller's
// own lock, whose leaseTransitions bounds every fencing token cle-controller
// has handed out (see Options.TokenBound).
const DefaultTokenBoundName = "cle-fencing-tokens"

// tokenSlack is how far above the highest token known the bound is raised
// at a time, so that it is written once per tokenSlack/2 terms of the
// busiest Lease rather than once per term, and so that the tokens a holder
// hands on by itself (a handover counts the next term; a first renewal may
// number its term one above what its process saw) stay below it until the
// controller sees them and raises it again.
const tokenSlack = 100

// tokenBoundCeiling is the highest token the bound follows. A Lease whose
// count is above it got that count from outside cle (cle-controller counts
// one term at a time from there): raising the bound to it would lift every
// other Lease's next term as high, and one Lease set near the int32 maximum
// (by mistake, or by anybody who may update one Lease or LeaseCandidate)
// would leave no term to number anywhere. Such a Lease's tokens rise across
// its deletion as far as the controller and its candidates remember it.
const tokenBoundCeiling = 1 << 24

// tokenBound keeps the fencing tokens of every Lease rising across its
// deletion, whichever replica elects next and whatever it remembers.
//
// A Lease records its own token (leaseTransitions), and the controller and
// the candidates remember what they saw of it; all of that can be gone at
// once: the Lease deleted, the candidates that saw its token exited (their
// LeaseCandidates with them), and the controller restarted or replaced. The
// bound outlives all of them: a number, kept in a Lease of its own, that no
// token handed out ever exceeds. A controller reads it before it numbers any
// term, numbers every term above what it read (and above the histories it
// dropped since), and raises it before it hands out a token above it. A
// replica that takes over reads the bound after its predecessor's last
// raise was answered (the predecessor sends a naming only after the raise
// that covers its token returned, and only while it holds its own lock), so
// it reads a bound above every token its predecessors named.
//
// Numbering every term above the bound read at the start means that after a
// replica takes over, every Lease's next token jumps to above the highest
// of all Leases: tokens only need to rise, not to count.
type tokenBound struct {
	ref     types.NamespacedName
	leases  func(ns string) access.LeaseClient
	holding func() bool

	mu sync.Mutex
	// loaded: start and durable were read from the server.
	loaded bool
	// start is the bound as read first: no token handed out before this
	// controller started is above it.
	start int32
	// durable is the bound on the server as last read or written, and rv
	// the resourceVersion of that object ("" when it does not exist).
	durable int32
	rv      string
	// off: the bound cannot be read or written (RBAC); tokens are numbered
	// as without it.
	off bool
}

func newTokenBound(o *Options, leases func(ns string) access.LeaseClient) *tokenBound {
	if o.TokenBound.Name == "" {
		return nil
	}
	return &tokenBound{ref: o.TokenBound, leases: leases, holding: o.Holding}
}

// tokenBounds returns what every term is numbered above (floor: the bound as
// it was when this controller started, 0 without one, and every token of a
// Lease history it dropped since) and the bound as it is now (current: what
// a Lease deleted since its last naming is numbered above).
func (c *Controller) tokenBounds(ctx context.Context) (floor, current int32, err error) {
	start, current, err := c.tokens.bounds(ctx)
	return max(start, c.obs.forgottenTokens()), current, err
}

// bounds returns the bound as it was when this controller started, reading
// it the first time, and as last read or written.
func (b *tokenBound) bounds(ctx context.Context) (start, current int32, err error) {
	if b == nil {
		return 0, 0, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.load(ctx); err != nil {
		return 0, 0, err
	}
	return b.start, b.durable, nil
}

// load reads the bound once; the caller holds the lock.
func (b *tokenBound) load(ctx context.Context) error {
	if b.loaded || b.off {
		return nil
	}
	if err := b.read(ctx); err != nil {
		return b.refused(ctx, "read", err)
	}
	b.loaded, b.start = true, b.durable
	klog.FromContext(ctx).V(2).Info("Numbering every fencing token above the bound recorded by earlier controllers",
		"tokenBound", klog.KRef(b.ref.Namespace, b.ref.Name), "bound", b.start)
	return nil
}

// read reads the bound from the server; the caller holds the lock.
func (b *tokenBound) read(ctx context.Context) error {
	l, err := b.leases(b.ref.Namespace).Get(ctx, b.ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		b.rv = ""
		return nil
	case err != nil:
		return err
	}
	b.durable, b.rv = max(b.durable, ptr.Deref(l.Spec.LeaseTransitions, 0)), l.ResourceVersion
	return nil
}

// refused turns a refusal by RBAC into running without the bound (said
// once, loudly); any other error is returned.
func (b *tokenBound) refused(ctx context.Context, op string, err error) error {
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("%s the fencing token bound %s: %w", op, b.ref, err)
	}
	b.off = true
	klog.FromContext(ctx).Error(err, "Cannot keep the fencing token bound: a Lease deleted and created again may start its tokens over; grant get, create and update of this Lease",
		"tokenBound", klog.KRef(b.ref.Namespace, b.ref.Name), "op", op)
	return nil
}

// cover makes sure that the bound on the server is at least token (and
// raises it tokenSlack above once token comes within half of that of it),
// before the caller hands out token. Once the bound cannot be read or
// written for lack of permission, or for a token above tokenBoundCeiling,
// it returns nil at once.
func (b *tokenBound) cover(ctx context.Context, token int32) error {
	if b == nil || token <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.load(ctx); err != nil {
		return err
	}
	if b.off || b.covers(token) || token > tokenBoundCeiling {
		return nil
	}
	if b.holding != nil && !b.holding() {
		return errNotHolding
	}
	want := token + tokenSlack
	for attempt := 0; ; attempt++ {
		err := b.raise(ctx, want)
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Raised the fencing token bound", "tokenBound", klog.KRef(b.ref.Namespace, b.ref.Name), "bound", b.durable, "token", token)
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) || attempt == 2 {
			return b.refused(ctx, "raise", err)
		}
		// Another replica raised it meanwhile (a deposed one's write in
		// flight): read what it wrote and raise from there.
		if err := b.read(ctx); err != nil {
			return b.refused(ctx, "read", err)
		}
		if b.covers(token) {
			return nil
		}
	}
}

// covers reports whether the bound is at least tokenSlack/2 above token;
// the caller holds the lock.
func (b *tokenBound) covers(token int32) bool {
	return int64(token)+tokenSlack/2 <= int64(b.durable)
}

// raise writes the bound want (or what is there, if higher), conditional on
// the resourceVersion read; the caller holds the lock.
func (b *tokenBound) raise(ctx context.Context, want int32) error {
	want = max(want, b.durable)
	leases := b.leases(b.ref.Namespace)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ref.Namespace, Name: b.ref.Name, ResourceVersion: b.rv,
			Labels: map[string]string{"app.kubernetes.io/part-of": "cle"}},
		Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To(want)},
	}
	var (
		written *coordinationv1.Lease
		err     error
	)
	if b.rv == "" {
		written, err = leases.Create(ctx, l)
	} else {
		written, err = leases.Update(ctx, l)
	}
	if err != nil {
		return err
	}
	b.durable, b.rv = max(b.durable, ptr.Deref(written.Spec.LeaseTransitions, 0)), written.ResourceVersion
	return nil
}

// errNotHolding: this replica's own lock lapsed; it hands out no token.
var errNotHolding = errors.New("this replica's own lock was not renewed within its renew deadline")
