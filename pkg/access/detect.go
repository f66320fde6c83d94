package access

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// ErrNativeUnavailable means the server cannot store native coordinated
// leader election: it does not serve coordination.k8s.io/v1beta1
// LeaseCandidates, or it drops Lease spec.strategy (the
// CoordinatedLeaderElection feature gate is off).
var ErrNativeUnavailable = errors.New("native coordinated leader election is not available on this server")

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

// Detect returns the access layer for mode ("auto" or a Mode). Native mode
// needs the server to serve LeaseCandidates and keep spec.strategy on a Lease,
// which is checked with a server-side dry-run create that stores nothing.
func Detect(ctx context.Context, clients Clients, mode string) (Interface, error) {
	if clients.Kube == nil {
		return nil, errors.New("access: Clients.Kube is required")
	}
	if mode != "auto" {
		if _, err := ParseMode(mode); err != nil {
			return nil, err
		}
	}
	if err := probeNative(ctx, clients.Kube); err != nil {
		return nil, err
	}
	return NewNative(clients.Kube), nil
}

func probeNative(ctx context.Context, client kubernetes.Interface) error {
	resources, err := client.Discovery().ServerResourcesForGroupVersion("coordination.k8s.io/v1beta1")
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: coordination.k8s.io/v1beta1 is not served", ErrNativeUnavailable)
	}
	if err != nil {
		return fmt.Errorf("discover coordination.k8s.io/v1beta1: %w", err)
	}
	served := false
	for _, r := range resources.APIResources {
		if r.Name == "leasecandidates" {
			served = true
		}
	}
	if !served {
		return fmt.Errorf("%w: coordination.k8s.io/v1beta1 does not serve leasecandidates", ErrNativeUnavailable)
	}
	probe, err := client.CoordinationV1().Leases(ProbeNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "cle-probe-"},
		Spec:       coordinationv1.LeaseSpec{Strategy: ptr.To(coordinationv1.OldestEmulationVersion)},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("probe Lease spec.strategy with a dry-run create: %w", err)
	}
	if probe.Spec.Strategy == nil {
		return fmt.Errorf("%w: the server drops Lease spec.strategy (CoordinatedLeaderElection gate off)", ErrNativeUnavailable)
	}
	return nil
}
