package access

import (
	"context"
	"errors"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// ErrNativeUnavailable means the server cannot store native coordinated
// leader election: it serves no coordination.k8s.io LeaseCandidate version
// cle knows, or it drops Lease spec.strategy (the
// CoordinatedLeaderElection feature gate is off).
var ErrNativeUnavailable = errors.New("native coordinated leader election is not available on this server")

// ErrCRDMissing means portable mode was chosen but the server does not serve
// the portable LeaseCandidate custom resource: the CRD in CRDManifest is not
// installed.
var ErrCRDMissing = errors.New("the portable LeaseCandidate CRD (leasecandidates.cle.dev) is not installed")

// CRDManifest is the kustomize directory, relative to the repository root,
// that installs what portable mode needs; CRDManifestFile is the CRD itself.
const (
	CRDManifest     = "manifests/crd"
	CRDManifestFile = "manifests/crd/leasecandidates.cle.dev.yaml"
)

// ProbeNamespace is where the strategy probe dry-runs a Lease.
const ProbeNamespace = "kube-system"

// Clients are the API clients the access layer works through.
type Clients struct {
	// Kube is required.
	Kube kubernetes.Interface
	// Dynamic reaches custom resources; only the portable mode needs it.
	Dynamic dynamic.Interface
}

// NewClients builds the clients the access layer needs from cfg.
// Built-in types travel as protobuf, which is cheaper to decode than JSON on
// every watch event; custom resources can only be JSON.
func NewClients(cfg *rest.Config) (Clients, error) {
	kubeCfg := rest.CopyConfig(cfg)
	if kubeCfg.ContentType == "" {
		kubeCfg.ContentType = runtime.ContentTypeProtobuf
		kubeCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	kube, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		return Clients{}, fmt.Errorf("create Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("create dynamic client: %w", err)
	}
	return Clients{Kube: kube, Dynamic: dyn}, nil
}

// Detect returns the access layer for mode: ModeAuto or a Mode.
//
// Native mode needs the server to serve LeaseCandidates (it uses the newest of
// coordination.k8s.io/v1beta1 and v1alpha2 that the server serves) and to
// keep spec.strategy on a Lease, which is checked with a server-side dry-run
// create that stores nothing; an explicit native mode
// on a server that cannot do it fails with ErrNativeUnavailable. Portable
// mode needs the CRD of CRDManifest; without it Detect fails with
// ErrCRDMissing and says what to apply. ModeAuto picks native when the
// server can do it and portable otherwise; any other failure of the probe
// (an unreachable server, a denied request) is returned rather than guessed
// around, because the two modes do not see each other's elections.
func Detect(ctx context.Context, clients Clients, mode string) (Interface, error) {
	if clients.Kube == nil {
		return nil, errors.New("access: Clients.Kube is required")
	}
	logger := klog.FromContext(ctx)
	if mode != ModeAuto {
		m, err := ParseMode(mode)
		if err != nil {
			return nil, err
		}
		if m == ModePortable {
			return detectPortable(ctx, clients)
		}
		n, err := probeNative(ctx, clients.Kube)
		if errors.Is(err, errStrategyProbeForbidden) && n != nil {
			// A candidate with least privilege may not create Leases in
			// kube-system; native mode was asked for explicitly, so trust it.
			logger.Info("Cannot check that the server keeps Lease spec.strategy; using native mode as asked", "reason", err.Error())
			err = nil
		}
		if err != nil {
			return nil, err
		}
		logNative(logger, n)
		return n, nil
	}
	return detectAuto(ctx, clients, nil)
}

// detectAuto chooses the mode for ModeAuto: native when the probe shows the
// server can do it, portable when it cannot. A probe that fails otherwise
// is returned rather than guessed around. When chooseNative is set, a
// server serving LeaseCandidates goes to it instead of to native mode, with
// probeDenied telling whether the dry run was forbidden.
func detectAuto(ctx context.Context, clients Clients, chooseNative func(n *native, probeDenied bool) (Interface, error)) (Interface, error) {
	logger := klog.FromContext(ctx)
	n, nativeErr := probeNative(ctx, clients.Kube)
	switch {
	case nativeErr == nil:
		logNative(logger, n)
		if chooseNative != nil {
			return chooseNative(n, false)
		}
		return n, nil
	case chooseNative != nil && n != nil && errors.Is(nativeErr, errStrategyProbeForbidden):
		return chooseNative(n, true)
	case !errors.Is(nativeErr, ErrNativeUnavailable):
		return nil, nativeErr
	}
	acc, err := detectPortable(ctx, clients)
	if err != nil {
		return nil, fmt.Errorf("%w; native mode is not possible either: %w", err, nativeErr)
	}
	logger.Info("Native coordinated leader election is not available on this server; using portable mode", "reason", nativeErr.Error())
	return acc, nil
}

func logNative(logger klog.Logger, n *native) {
	if n.candidates.groupVersion != nativeCandidateAPIs[0].groupVersion {
		logger.Info("The server does not serve the newest LeaseCandidate API; native mode uses an older one", "newest", nativeCandidateAPIs[0].groupVersion, "using", n.candidates.groupVersion)
		return
	}
	logger.V(2).Info("Server supports native coordinated leader election", "leaseCandidates", n.candidates.groupVersion)
}

// detectPortable returns the portable access layer once the server is seen
// to serve its custom resource.
func detectPortable(ctx context.Context, clients Clients) (Interface, error) {
	if clients.Dynamic == nil {
		return nil, errors.New("access: portable mode needs Clients.Dynamic")
	}
	missing := func(why string) error {
		return fmt.Errorf("%w: %s; install it with `kubectl apply -k %s` (the CRD is %s)", ErrCRDMissing, why, CRDManifest, CRDManifestFile)
	}
	gv := CandidateResource.GroupVersion().String()
	resources, err := clients.Kube.Discovery().ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return nil, missing(gv + " is not served")
	}
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", gv, err)
	}
	if !servesResource(resources, CandidateResource.Resource) {
		return nil, missing(gv + " does not serve " + CandidateResource.Resource)
	}
	return NewPortable(clients)
}

func servesResource(resources *metav1.APIResourceList, name string) bool {
	for _, r := range resources.APIResources {
		if r.Name == name {
			return true
		}
	}
	return false
}

// probeNative returns the native access layer over the newest LeaseCandidate
// version the server serves, once a dry-run create shows that the server keeps
// Lease spec.strategy.
func probeNative(ctx context.Context, client kubernetes.Interface) (*native, error) {
	var api *nativeCandidateAPI
	var tried []string
	for i := range nativeCandidateAPIs {
		gv := nativeCandidateAPIs[i].groupVersion
		tried = append(tried, gv)
		resources, err := client.Discovery().ServerResourcesForGroupVersion(gv)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("discover %s: %w", gv, err)
		}
		if servesResource(resources, "leasecandidates") {
			api = &nativeCandidateAPIs[i]
			break
		}
	}
	if api == nil {
		return nil, fmt.Errorf("%w: the server serves no LeaseCandidate API (tried %s)", ErrNativeUnavailable, strings.Join(tried, ", "))
	}
	probe, err := client.CoordinationV1().Leases(ProbeNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "cle-probe-"},
		Spec:       coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.OldestEmulationVersion)},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	n := &native{client: client, candidates: *api}
	if apierrors.IsForbidden(err) {
		return n, fmt.Errorf("%w: %w", errStrategyProbeForbidden, err)
	}
	if err != nil {
		return nil, fmt.Errorf("probe Lease spec.strategy with a dry-run create: %w", err)
	}
	if probe.Spec.Strategy == nil {
		return nil, fmt.Errorf("%w: the server drops Lease spec.strategy (CoordinatedLeaderElection gate off)", ErrNativeUnavailable)
	}
	return n, nil
}

// errStrategyProbeForbidden: the dry-run create that checks Lease
// spec.strategy was denied. probeNative then also returns the access layer
// for the LeaseCandidate version found, for an explicit native mode to use.
var errStrategyProbeForbidden = errors.New("probe Lease spec.strategy with a dry-run create")
