package kubectlcle

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// ControllerLockNamespace is where the election controllers' lock Lease is:
// access.Interface.ControllerLockName names it.
const ControllerLockNamespace = metav1.NamespaceSystem

// ElectionController judges which election controller acts, from the lock
// Lease in the API mode, or the error reading it. A lock that does not exist
// means nobody acts; one that cannot be read for another reason (a user
// without the right to read Leases in kube-system) makes it unknown, which
// is not an error: the elections can still be shown.
//
// The holder acts until leaseDurationSeconds after the lock's renewTime,
// judged on this machine's clock (access.JudgeActingController).
func ElectionController(key types.NamespacedName, lock *coordinationv1.Lease, readErr error, mode access.Mode, now time.Time) *ElectionControllerStatus {
	e := &ElectionControllerStatus{Lock: key.String()}
	switch {
	case apierrors.IsNotFound(readErr):
		e.State, e.Reason = ControllerNone, "no Lease "+key.String()
		return e
	case apierrors.IsForbidden(readErr) || apierrors.IsUnauthorized(readErr):
		e.State, e.Reason = ControllerUnknown, "cannot read Lease "+key.String()+": forbidden"
		return e
	case readErr != nil:
		e.State, e.Reason = ControllerUnknown, fmt.Sprintf("cannot read Lease %s: %v", key, readErr)
		return e
	case lock == nil:
		e.State, e.Reason = ControllerNone, "no Lease "+key.String()
		return e
	}
	renewed := access.LastRenewal(lock)
	a := access.JudgeActingController(lock, mode, renewed, now)
	e.Holder = a.Holder
	e.RenewTime = lock.Spec.RenewTime
	if !a.Since.IsZero() {
		e.Since = ptr.To(metav1.NewTime(a.Since))
	}
	switch {
	case a.Controller != "":
		e.State, e.Controller = ControllerActing, a.Controller
	case a.Holder == "":
		e.State, e.Reason = ControllerNone, "Lease "+key.String()+" names no holder"
	case renewed.IsZero():
		e.State, e.Reason = ControllerNone, fmt.Sprintf("holder %s never renewed Lease %s", a.Holder, key)
	default:
		e.State, e.Reason = ControllerNone, fmt.Sprintf("holder %s stopped renewing Lease %s, last %s ago", a.Holder, key, duration.HumanDuration(now.Sub(renewed)))
	}
	return e
}

// Summary says in one line which election controller acts, e.g.
// "kube-apiserver (holder h), acting for 5m (kube-system/leader-election-controller)".
func (e *ElectionControllerStatus) Summary(now time.Time) string {
	switch e.State {
	case ControllerActing:
		if e.Since == nil {
			return fmt.Sprintf("%s (holder %s), acting (%s)", e.Controller, e.Holder, e.Lock)
		}
		return fmt.Sprintf("%s (holder %s), acting for %s (%s)", e.Controller, e.Holder, age(e.Since.Time, now), e.Lock)
	case ControllerNone:
		return "none acting (" + e.Reason + ")"
	default:
		return "unknown (" + e.Reason + ")"
	}
}
