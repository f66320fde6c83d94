package access

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1alpha2 "k8s.io/api/coordination/v1alpha2"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DetectReadOnly returns the access layer for mode, as Detect does, for a
// client that only shows elections, such as kubectl cle, possibly run by a
// user bound to the view ClusterRole. It writes nothing. With ModeAuto it
// answers which mode elections run in, where Detect answers which mode the
// server can do, and it chooses where Detect would fail because the dry-run
// create of a Lease that checks Lease spec.strategy is forbidden:
//
//   - when the server serves a coordination.k8s.io LeaseCandidate API but
//     not the portable CRD, only native mode is possible;
//   - when it serves both (the portable bundle installed on a server with
//     the CoordinatedLeaderElection gate on, say), the election
//     controllers' lock Leases in kube-system tell which mode elections run
//     in: native when NativeControllerLock is held and renewed and
//     PortableControllerLock is not, portable the other way round;
//   - failing that, which kind of LeaseCandidates exists in namespace,
//     when only one does there: both controllers act on such a server, each
//     for its own kind of LeaseCandidates, and a namespace's elections run
//     where its candidates are;
//   - failing that, which kind of LeaseCandidates exists in any namespace,
//     when only one does;
//   - failing that, native mode, which Detect would choose on such a server
//     (serving LeaseCandidates means the CoordinatedLeaderElection gate is
//     on).
//
// namespace is the one the caller shows ("" for all namespaces). Reads that
// are themselves denied (the locks, a list of LeaseCandidates) leave their
// clue out. The choice and why are logged at the
// Info level of the context's logger, for the caller to give a verbosity.
// Explicit modes, and a server where only one mode is possible, behave as
// with Detect; so do errors other than a denied probe.
func DetectReadOnly(ctx context.Context, clients Clients, mode, namespace string, clk clock.PassiveClock) (Interface, error) {
	if mode != ModeAuto {
		return Detect(ctx, clients, mode)
	}
	if clients.Kube == nil {
		return nil, errors.New("access: Clients.Kube is required")
	}
	return detectAuto(ctx, clients, func(n *native, probeDenied bool) (Interface, error) {
		return chooseReadOnly(ctx, clients, n, namespace, clk.Now(), probeDenied)
	})
}

// chooseReadOnly chooses between the modes without writing, on a server that
// serves native LeaseCandidates; probeDenied says the dry-run create that
// checks Lease spec.strategy was forbidden, so that native mode is not
// proven possible.
func chooseReadOnly(ctx context.Context, clients Clients, n *native, namespace string, now time.Time, probeDenied bool) (Interface, error) {
	logger := klog.FromContext(ctx)
	p, err := detectPortable(ctx, clients)
	if err != nil && !probeDenied {
		// Native mode is possible and portable mode apparently not: as
		// Detect.
		logger.V(2).Info("Using native mode: the portable CRD is not usable", "reason", err.Error())
		return n, nil
	}
	if errors.Is(err, ErrCRDMissing) {
		logger.Info("Using native mode: the server serves LeaseCandidates and not the portable CRD (a dry-run create of a Lease cannot check more: it is forbidden)",
			"leaseCandidates", n.candidates.groupVersion)
		return n, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the server serves native LeaseCandidates, the dry-run create of a Lease that checks Lease spec.strategy is forbidden, and discovery of the portable CRD failed: %w", err)
	}
	m, why := chooseByWhatExists(ctx, clients, n, namespace, now)
	msg := "Both API modes are possible on this server; chose the one elections run in by what exists"
	if probeDenied {
		msg = "Both API modes are possible and a dry-run create of a Lease is forbidden; chose by what exists"
	}
	logger.Info(msg+" (--api-mode=native or portable chooses explicitly)", "mode", m, "reason", why)
	if m == ModePortable {
		return p, nil
	}
	return n, nil
}

// chooseByWhatExists picks a mode on a server that serves both kinds of
// LeaseCandidates, for a caller that shows namespace ("" for all), and says
// why.
func chooseByWhatExists(ctx context.Context, clients Clients, n *native, namespace string, now time.Time) (Mode, string) {
	leases := clients.Kube.CoordinationV1().Leases(ProbeNamespace)
	acting := func(name string, mode Mode) (bool, string) {
		lock, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Sprintf("Lease %s/%s: %v", ProbeNamespace, name, err)
		}
		a := JudgeActingController(lock, mode, LastRenewal(lock), now)
		if a.Controller == "" {
			return false, fmt.Sprintf("Lease %s/%s is not held and renewed", ProbeNamespace, name)
		}
		return true, fmt.Sprintf("Lease %s/%s is held and renewed by %s", ProbeNamespace, name, a.Holder)
	}
	nativeActing, nativeWhy := acting(NativeControllerLock, ModeNative)
	portableActing, portableWhy := acting(PortableControllerLock, ModePortable)
	switch {
	case nativeActing && !portableActing:
		return ModeNative, nativeWhy + "; " + portableWhy
	case portableActing && !nativeActing:
		return ModePortable, portableWhy + "; " + nativeWhy
	}
	locks := nativeWhy + "; " + portableWhy

	why := locks
	namespaces := []string{metav1.NamespaceAll}
	if namespace != metav1.NamespaceAll {
		namespaces = []string{namespace, metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		nativeCands, nativeCandsWhy := n.anyCandidate(ctx, ns)
		portableCands, portableCandsWhy := anyPortableCandidate(ctx, clients, ns)
		switch {
		case nativeCands && !portableCands:
			return ModeNative, why + "; " + nativeCandsWhy + "; " + portableCandsWhy
		case portableCands && !nativeCands:
			return ModePortable, why + "; " + portableCandsWhy + "; " + nativeCandsWhy
		}
		why += "; " + nativeCandsWhy + "; " + portableCandsWhy
	}
	return ModeNative, why + "; nothing tells the modes apart, so native, as a dry-run create would show on a server that serves LeaseCandidates"
}

// where says which namespace a list of LeaseCandidates was of.
func where(namespace string) string {
	if namespace == metav1.NamespaceAll {
		return " in any namespace"
	}
	return " in namespace " + namespace
}

// LastRenewal is when a Lease's holder last renewed it by its own account:
// its renewTime, else its acquireTime, else never (the zero time).
func LastRenewal(lock *coordinationv1.Lease) time.Time {
	switch {
	case lock.Spec.RenewTime != nil:
		return lock.Spec.RenewTime.Time
	case lock.Spec.AcquireTime != nil:
		return lock.Spec.AcquireTime.Time
	default:
		return time.Time{}
	}
}

// anyCandidate reports whether a LeaseCandidate of native mode exists in
// namespace ("" for any), and says what it found.
func (n *native) anyCandidate(ctx context.Context, namespace string) (bool, string) {
	opts := metav1.ListOptions{Limit: 1}
	var count int
	var err error
	switch n.candidates.groupVersion {
	case coordinationv1beta1.SchemeGroupVersion.String():
		var list *coordinationv1beta1.LeaseCandidateList
		if list, err = n.client.CoordinationV1beta1().LeaseCandidates(namespace).List(ctx, opts); err == nil {
			count = len(list.Items)
		}
	case coordinationv1alpha2.SchemeGroupVersion.String():
		var list *coordinationv1alpha2.LeaseCandidateList
		if list, err = n.client.CoordinationV1alpha2().LeaseCandidates(namespace).List(ctx, opts); err == nil {
			count = len(list.Items)
		}
	default:
		return false, "no list of " + n.candidates.groupVersion + " LeaseCandidates"
	}
	return describeCandidateList(n.candidates.groupVersion+" LeaseCandidates", namespace, count, err)
}

// anyPortableCandidate reports whether a portable LeaseCandidate exists in
// namespace ("" for any), and says what it found.
func anyPortableCandidate(ctx context.Context, clients Clients, namespace string) (bool, string) {
	list, err := clients.Dynamic.Resource(CandidateResource).Namespace(namespace).List(ctx, metav1.ListOptions{Limit: 1})
	count := 0
	if err == nil {
		count = len(list.Items)
	}
	return describeCandidateList(CandidateResource.GroupVersion().String()+" LeaseCandidates", namespace, count, err)
}

func describeCandidateList(what, namespace string, count int, err error) (bool, string) {
	switch {
	case err != nil:
		return false, fmt.Sprintf("cannot list %s%s: %v", what, where(namespace), err)
	case count == 0:
		return false, "no " + what + " exist" + where(namespace)
	default:
		return true, what + " exist" + where(namespace)
	}
}
