package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// The Lease on which kube-apiserver's built-in election controller is itself
// leader-elected.
const (
	BuiltinControllerLeaseNamespace = "kube-system"
	BuiltinControllerLeaseName      = "leader-election-controller"
	// IdlerIdentity holds the built-in controller's Lease while it is idled.
	IdlerIdentity = "cle-integration-idler"
)

const (
	idlerLeaseSeconds  = 3600
	idlerRenewInterval = 2 * time.Second
)

// idler holds the built-in election controller's Lease with a long duration
// and renews it, so that kube-apiserver's elector never sees it vacant or
// expired and its election controller stays stopped.
type idler struct {
	client kubernetes.Interface
	logf   func(string, ...any)
	cancel context.CancelFunc
	done   chan struct{}
	lease  *coordinationv1.Lease // our last successful write
}

func (s *Server) idlerConfig() *rest.Config {
	cfg := s.Config()
	cfg.Timeout = 5 * time.Second // a paused server must not hang the renew loop
	cfg.UserAgent = IdlerIdentity
	return cfg
}

// startIdler takes the Lease, waits until a built-in controller that led
// before the takeover must have stopped, checks that nobody else wrote the
// Lease in the meantime, and then keeps renewing it.
func startIdler(ctx context.Context, cfg *rest.Config, logf func(string, ...any)) (*idler, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("idler client: %w", err)
	}
	i := &idler{client: client, logf: logf, done: make(chan struct{})}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := i.take(ctx); err != nil {
			logf("idler: taking Lease %s/%s: %v", BuiltinControllerLeaseNamespace, BuiltinControllerLeaseName, err)
			return false, nil
		}
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("take the built-in election controller's Lease: %w", err)
	}

	// The built-in elector stops leading at most its renew deadline after
	// its last successful renewal, which happened before the takeover.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(BuiltinRenewDeadline + 2*BuiltinRetryPeriod):
	}
	current, err := client.CoordinationV1().Leases(BuiltinControllerLeaseNamespace).Get(ctx, BuiltinControllerLeaseName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("verify the built-in controller is idle: %w", err)
	}
	if current.ResourceVersion != i.lease.ResourceVersion {
		return nil, fmt.Errorf("built-in controller not idle: its Lease was written by %q after the takeover", ptr.Deref(current.Spec.HolderIdentity, ""))
	}

	runCtx, cancel := context.WithCancel(context.Background())
	i.cancel = cancel
	go i.renewLoop(runCtx)
	return i, nil
}

// take makes the Lease name the idler, creating it if needed.
func (i *idler) take(ctx context.Context) error { return i.write(ctx, IdlerIdentity) }

// write makes the Lease name holder as freshly renewed, marked as cle's
// holder, creating it if needed.
func (i *idler) write(ctx context.Context, holder string) error {
	leases := i.client.CoordinationV1().Leases(BuiltinControllerLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, BuiltinControllerLeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: BuiltinControllerLeaseNamespace, Name: BuiltinControllerLeaseName},
		}
	} else if err != nil {
		return err
	}
	lease = lease.DeepCopy()
	if ptr.Deref(lease.Spec.HolderIdentity, "") != holder {
		lease.Spec.HolderIdentity = ptr.To(holder)
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](idlerLeaseSeconds)
	lease.Spec.RenewTime = &now
	// The idler holds the lock for cle-controller, which then elects
	// without contending for it: marked as cle's holder, so that kubectl cle
	// and cle_election_controller_acting say that cle acts, as it does.
	metav1.SetMetaDataLabel(&lease.ObjectMeta, access.ControllerHolderLabel, access.ControllerHolderHash(holder))
	if lease.ResourceVersion == "" {
		lease, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	} else {
		lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	i.lease = lease
	return nil
}

func (i *idler) renewLoop(ctx context.Context) {
	defer close(i.done)
	ticker := time.NewTicker(idlerRenewInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		lease := i.lease.DeepCopy()
		lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		updated, err := i.client.CoordinationV1().Leases(lease.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
		switch {
		case err == nil:
			i.lease = updated
		case ctx.Err() != nil:
			return
		default:
			// The server may be stopped or paused by the test; a conflict
			// means somebody else wrote the Lease, so read it and take it back.
			i.logf("idler: renewing Lease: %v", err)
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				if err := i.take(ctx); err != nil {
					i.logf("idler: retaking Lease: %v", err)
				}
			}
		}
	}
}

func (i *idler) stop() {
	if i.cancel != nil {
		i.cancel()
		<-i.done
	}
}

// release stops the renewals and lets the Lease go: it names nobody, so
// kube-apiserver's elector acquires it at its next try.
func (i *idler) release(ctx context.Context) error {
	i.stop()
	lease := i.lease.DeepCopy()
	lease.Spec.HolderIdentity = nil
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	_, err := i.client.CoordinationV1().Leases(lease.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// IdleBuiltinController keeps the election controller built into
// kube-apiserver from acting from now on, as Options.IdleBuiltinController
// does from the start; it returns once that controller must have stopped.
func (s *Server) IdleBuiltinController(ctx context.Context) error {
	if !s.opts.CoordinatedLeaderElection {
		return errors.New("IdleBuiltinController needs CoordinatedLeaderElection")
	}
	if s.idler != nil {
		return nil
	}
	i, err := startIdler(ctx, s.idlerConfig(), s.opts.Logf)
	if err != nil {
		return err
	}
	s.idler = i
	return nil
}

// HandBuiltinControllerLease stops idling the built-in controller by giving
// its Lease to identity, a cle-controller elected with that
// --leader-elect-identity: the Lease names it as freshly renewed, so that
// its elector, seeing itself as the holder, renews it, while kube-apiserver's
// sees a valid Lease held by another and stands by. Nobody races for a
// vacant Lease. It returns once identity has renewed the Lease itself.
func (s *Server) HandBuiltinControllerLease(ctx context.Context, identity string) error {
	if s.idler == nil {
		return errors.New("HandBuiltinControllerLease needs an idled built-in controller")
	}
	i := s.idler
	s.idler = nil
	i.stop()
	if err := i.write(ctx, identity); err != nil {
		return fmt.Errorf("hand the built-in election controller's Lease to %s: %w", identity, err)
	}
	handed := i.lease
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := i.client.CoordinationV1().Leases(BuiltinControllerLeaseNamespace).Get(ctx, BuiltinControllerLeaseName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder != identity {
			return false, fmt.Errorf("the built-in election controller's Lease went to %q, not %s", holder, identity)
		}
		return l.ResourceVersion != handed.ResourceVersion, nil
	})
}

// WakeBuiltinController undoes IdleBuiltinController: it releases the
// built-in controller's Lease and returns once kube-apiserver holds it, so
// that its election controller acts again.
func (s *Server) WakeBuiltinController(ctx context.Context) error {
	if s.idler == nil {
		return nil
	}
	i := s.idler
	s.idler = nil
	if err := i.release(ctx); err != nil {
		return fmt.Errorf("release the built-in election controller's Lease: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := i.client.CoordinationV1().Leases(BuiltinControllerLeaseNamespace).Get(ctx, BuiltinControllerLeaseName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		return holder != "" && holder != IdlerIdentity, nil
	})
}
