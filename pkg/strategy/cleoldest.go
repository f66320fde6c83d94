package strategy

import (
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// OldestEmulationVersionByCleName selects OldestEmulationVersionByCle in spec.strategy (or the cle.dev/strategy
// annotation).
const OldestEmulationVersionByCleName coordinationv1.CoordinatedLeaseStrategy = "cle.dev/OldestEmulationVersion"

// OldestEmulationVersionByCle ranks exactly as OldestEmulationVersion does, under a name that only cle elects.
//
// On a cluster with the CoordinatedLeaderElection gate on, the election controller built into kube-apiserver
// elects every Lease whose candidates ask for "OldestEmulationVersion", and cle-controller leaves those Leases
// to it. A component that wants the version-safe order with cle's election (its ping pacing, proof of death,
// no flapping between equal candidates) asks for this strategy instead: kube-apiserver's controller never names
// a holder under a strategy it does not know. Where kube-apiserver runs no election controller, the two names
// elect the same leader.
type OldestEmulationVersionByCle struct{ OldestEmulationVersion }

var _ Strategy = OldestEmulationVersionByCle{}

// Name returns OldestEmulationVersionByCleName.
func (OldestEmulationVersionByCle) Name() coordinationv1.CoordinatedLeaseStrategy {
	return OldestEmulationVersionByCleName
}

// VersionOrdered tells whether a strategy orders candidates by emulation version alone, as Kubernetes'
// OldestEmulationVersion does: a holder that emulates a newer version than a live candidate is then out of
// order.
func VersionOrdered(name coordinationv1.CoordinatedLeaseStrategy) bool {
	return name == coordinationv1.OldestEmulationVersion || name == OldestEmulationVersionByCleName
}

// Builtin tells whether kube-apiserver's own election controller elects under a strategy: the strategies
// without a domain prefix, which Kubernetes defines (today OldestEmulationVersion alone). It ignores a Lease of
// any other strategy once it has a holder, and creates or updates one it finds vacant or expired without naming
// a holder, leaving the election to another controller.
func Builtin(name coordinationv1.CoordinatedLeaseStrategy) bool {
	return name != "" && !strings.Contains(string(name), "/")
}
