// Package access is the one place that knows how coordinated leader election
// is stored in the API. The election controller and the candidate library
// talk to it in one vocabulary, whatever the API mode:
//
//   - LeaseCandidates are *coordinationv1beta1.LeaseCandidate objects;
//   - Leases are *coordinationv1.Lease objects whose spec.strategy and
//     spec.preferredHolder carry the coordinated election fields.
//
// In native mode these are the Kubernetes objects themselves. In portable mode
// LeaseCandidates are the custom resource cle.dev/v1beta1 LeaseCandidate (the
// CRD in manifests/crd) and a Lease carries its strategy and preferred holder
// in the annotations cle.dev/strategy and cle.dev/preferred-holder, because a
// kube-apiserver without the CoordinatedLeaderElection gate drops the spec
// fields. The mapping happens inside this package only: nothing outside it
// branches on the mode.
//
// It is not a supported API: its exported names serve cle's own programs
// (cle-controller, kubectl-cle, the tests) and may change in any release.
// Components import pkg/candidate, pkg/lock or contrib/controller-runtime.
package access

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// Mode is how coordinated leader election is stored in the API.
type Mode string

const (
	// ModeNative uses coordination.k8s.io/v1beta1 LeaseCandidates and the
	// Lease fields spec.strategy and spec.preferredHolder. It needs
	// kube-apiserver with the CoordinatedLeaderElection feature gate on.
	ModeNative Mode = "native"
	// ModePortable uses the cle.dev/v1beta1 LeaseCandidate custom resource
	// and Lease annotations. It works on any cluster with the CRD installed,
	// feature gates or not.
	ModePortable Mode = "portable"
)

// ModeAuto asks Detect to choose: native when the server can store native
// coordinated leader election, portable otherwise. It is not a Mode: an
// access layer always has a definite one.
const ModeAuto = "auto"

// The annotations that carry a Lease's coordinated election fields in
// portable mode: the values of spec.strategy and spec.preferredHolder.
const (
	StrategyAnnotation        = "cle.dev/strategy"
	PreferredHolderAnnotation = "cle.dev/preferred-holder"
)

// WriterAnnotation names, on a LeaseCandidate of either mode, the Kubernetes
// user that registers and renews it (a ServiceAccount's user name, such as
// system:serviceaccount:team-a:my-controller). The admission policies of
// manifests/policies let only that user write the candidate, and only the
// election controller change its pingTime.
const WriterAnnotation = "cle.dev/writer"

// The annotations of the proof of death (docs/design.md, "Proof of death").
// A candidate running in a Pod registers, on its LeaseCandidate, the process
// instance that runs it (InstanceAnnotation, a random value drawn when the
// process starts), its Pod (PodAnnotation, "namespace/name") and its
// container in that Pod (ContainerAnnotation). While it leads, every renewal
// of the Lease says which instance wrote it (HolderInstanceAnnotation,
// "<instance> <renewTime> <pod> <container> <holder>"), so that the
// controller knows which process holds the term.
const (
	InstanceAnnotation       = "cle.dev/instance"
	PodAnnotation            = "cle.dev/pod"
	ContainerAnnotation      = "cle.dev/container"
	HolderInstanceAnnotation = "cle.dev/holder-instance"
)

// HighestTokenAnnotation records, on a LeaseCandidate of either mode, the
// highest fencing token (a leaseTransitions) that the candidate's processes
// held a term with, or saw on its Lease, as a decimal number. It outlives the
// Lease: an election controller that numbers a Lease's next term without
// having seen its history (the Lease was deleted, and the controller started
// or took over since) numbers it above every candidate's, so that a fenced
// resource that accepted a token never sees a lower one. A candidate writes
// it when a term of its starts, and with the writes it makes anyway; it
// never lowers it.
const HighestTokenAnnotation = "cle.dev/highest-token"

// HighestToken is the token HighestTokenAnnotation records in annotations,
// 0 when there is none or it is not a number from 1 to 2^31-1.
func HighestToken(annotations map[string]string) int32 {
	n, err := strconv.ParseInt(annotations[HighestTokenAnnotation], 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// Default names of the election controller's own leader-election Lease, in
// kube-system. In native mode it is the Lease of the controller built into
// kube-apiserver: contending for the same Lease makes exactly one coordinated
// election controller act at a time. In portable mode there is no built-in
// controller to exclude, and cle-controller uses a Lease of its own.
const (
	NativeControllerLock   = "leader-election-controller"
	PortableControllerLock = "cle-controller"
)

// Interface gives mode-independent access to LeaseCandidates and Leases.
type Interface interface {
	// Mode is the API mode in use.
	Mode() Mode
	// ControllerLockName is the default name of the Lease (in kube-system) on
	// which election controllers are themselves leader-elected in this mode.
	ControllerLockName() string
	// LeaseCandidates accesses the LeaseCandidates of one namespace.
	LeaseCandidates(namespace string) CandidateClient
	// CandidateReference refers to a LeaseCandidate as the API serves it in
	// this mode, e.g. as the related object of an Event.
	CandidateReference(lc *coordinationv1beta1.LeaseCandidate) *corev1.ObjectReference
	// Leases accesses the Leases of one namespace.
	Leases(namespace string) LeaseClient
	// NewCandidateInformer returns an informer on the LeaseCandidates of
	// namespace (all namespaces if empty) whose store holds
	// *coordinationv1beta1.LeaseCandidate. tweak may narrow the list and
	// watch (e.g. to one object); it may be nil.
	NewCandidateInformer(namespace string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer
	// NewLeaseInformer returns an informer on the Leases of namespace (all if
	// empty) whose store holds *coordinationv1.Lease with the coordinated
	// fields in spec.
	NewLeaseInformer(namespace string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer
}

// CandidateClient reads and writes the LeaseCandidates of one namespace.
// Updates and deletes are conditional on the resourceVersion given.
type CandidateClient interface {
	Get(ctx context.Context, name string) (*coordinationv1beta1.LeaseCandidate, error)
	Create(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error)
	Update(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error)
	Delete(ctx context.Context, name string, preconditions *metav1.Preconditions) error
}

// LeaseClient reads and writes the Leases of one namespace, with the
// coordinated fields in spec.
type LeaseClient interface {
	Get(ctx context.Context, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, preconditions *metav1.Preconditions) error
}

// ParseMode parses an explicit API mode: native or portable. ModeAuto is
// not a Mode; Detect resolves it.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeNative, ModePortable:
		return m, nil
	default:
		return "", fmt.Errorf("unknown API mode %q: want %q or %q", s, ModeNative, ModePortable)
	}
}

// candidateReference refers to lc as a LeaseCandidate of group version gv.
func candidateReference(gv schema.GroupVersion, lc *coordinationv1beta1.LeaseCandidate) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: gv.String(), Kind: "LeaseCandidate",
		Namespace: lc.Namespace, Name: lc.Name, UID: lc.UID, ResourceVersion: lc.ResourceVersion,
	}
}
