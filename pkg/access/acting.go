package access

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// ControllerHolderLabel marks the election controller's lock Lease with the
// holder that cle-controller wrote: ControllerHolderHash of its identity. In
// native mode cle-controller and the controller built into kube-apiserver
// contend for one Lease, and both name holders as hostname_uuid; the label
// tells them apart. kube-apiserver's elector keeps labels it does not know,
// so a holder is cle-controller only while the label matches it.
const ControllerHolderLabel = "cle.dev/controller-holder"

// ControllerHolderHash is the value of ControllerHolderLabel for identity:
// a label value cannot hold every identity (63 characters at most).
func ControllerHolderHash(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(sum[:16])
}

// HeldByCle tells whether lock names a holder that is a cle-controller
// replica: ControllerHolderLabel matches it, whether it still renews or not.
func HeldByCle(lock *coordinationv1.Lease) bool {
	if lock == nil || lock.Spec.HolderIdentity == nil || *lock.Spec.HolderIdentity == "" {
		return false
	}
	return lock.Labels[ControllerHolderLabel] == ControllerHolderHash(*lock.Spec.HolderIdentity)
}

// The election controllers that can act on coordinated elections.
const (
	ActingCle           = "cle"
	ActingKubeAPIServer = "kube-apiserver"
)

// ActingController is who runs coordinated elections: the holder of the
// election controller's lock Lease while it renews.
type ActingController struct {
	// Controller is ActingCle, ActingKubeAPIServer, or "" when nobody acts:
	// the lock has no holder, or the holder stopped renewing.
	Controller string
	// Holder is the lock's holderIdentity, also when it expired.
	Holder string
	// Since is when the holder acquired the lock (acquireTime).
	Since time.Time
}

// JudgeActingController says who acts, from the election controller's lock
// Lease (nil when there is none), the API mode, when the holder last
// renewed as the caller knows it, and the present. A holder acts until
// leaseDurationSeconds after renewed. In portable mode only cle-controller
// takes the lock.
func JudgeActingController(lock *coordinationv1.Lease, mode Mode, renewed, now time.Time) ActingController {
	if lock == nil || lock.Spec.HolderIdentity == nil || *lock.Spec.HolderIdentity == "" {
		return ActingController{}
	}
	a := ActingController{Holder: *lock.Spec.HolderIdentity}
	if lock.Spec.AcquireTime != nil {
		a.Since = lock.Spec.AcquireTime.Time
	}
	duration := time.Duration(0)
	if lock.Spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*lock.Spec.LeaseDurationSeconds) * time.Second
	}
	if !now.Before(renewed.Add(duration)) {
		return a
	}
	a.Controller = ActingKubeAPIServer
	if mode == ModePortable || HeldByCle(lock) {
		a.Controller = ActingCle
	}
	return a
}
