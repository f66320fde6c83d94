package framework

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
)

// ControllerOptions configures an in-process cle election controller.
type ControllerOptions struct {
	// Namespaces limits the controller's informers; required, so that tests
	// sharing one server do not see each other's objects.
	Namespaces []string
	// UserAgent marks the controller's requests (and its managedFields
	// entries). Default "cle-controller-under-test".
	UserAgent string
	// User is who the controller authenticates as: one of the server's
	// Options.Users. Default AdminUser, a member of system:masters.
	User string
	// APIMode is passed to access.Detect; default "auto".
	APIMode string
	// Workers defaults to 2.
	Workers int
	// Controller is passed to controller.New; Recorder and Metrics are filled
	// in when nil, and TokenBound, as cle-controller sets it, in the first of
	// Namespaces when unset.
	Controller controller.Options
	// WrapTransport, when set, wraps the transport of every request of the
	// controller (its informers' included), e.g. to fail them for a while.
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// ProofOfDeath reads the Pods of Namespaces (cle-controller's
	// --proof-of-death).
	ProofOfDeath bool
}

// DefaultControllerUserAgent is the user agent of StartController's requests.
const DefaultControllerUserAgent = "cle-controller-under-test"

// RunningController is a controller started by StartController.
type RunningController struct {
	Controller *controller.Controller
	Metrics    *controller.Metrics
	Access     access.Interface
	stop       func()
}

// Stop stops the controller before the test ends; it is safe to call more
// than once.
func (r *RunningController) Stop() { r.stop() }

// StartController runs cle's election controller in this process until the
// test ends, and returns once its caches have synced: objects created after
// that are seen being created, so their freshness is known to it.
func (s *Server) StartController(t testing.TB, o ControllerOptions) *RunningController {
	t.Helper()
	if len(o.Namespaces) == 0 {
		t.Fatal("StartController: Namespaces is required")
	}
	if o.UserAgent == "" {
		o.UserAgent = DefaultControllerUserAgent
	}
	if o.APIMode == "" {
		o.APIMode = "auto"
	}
	if o.Workers == 0 {
		o.Workers = 2
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	cfg := s.Config()
	if o.User != "" {
		var err error
		if cfg, err = s.UserConfig(o.User); err != nil {
			cancel()
			t.Fatal(err)
		}
	}
	cfg.UserAgent = o.UserAgent
	if o.WrapTransport != nil {
		cfg.Wrap(o.WrapTransport)
	}
	clients, err := access.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.Detect(ctx, clients, o.APIMode)
	if err != nil {
		cancel()
		t.Fatalf("access mode %q: %v", o.APIMode, err)
	}
	informers := controller.NewInformers(acc, o.Namespaces, 0)
	if o.ProofOfDeath {
		for _, ns := range o.Namespaces {
			informers.Pods = append(informers.Pods, controller.NewPodWatch(clients.Kube, ns, ""))
		}
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clients.Kube.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	opts := o.Controller
	if opts.Recorder == nil {
		opts.Recorder = broadcaster.NewRecorder(scheme.Scheme, "cle-controller")
	}
	if opts.Metrics == nil {
		opts.Metrics = controller.NewMetrics()
	}
	if opts.TokenBound.Name == "" {
		opts.TokenBound = types.NamespacedName{Namespace: o.Namespaces[0], Name: controller.DefaultTokenBoundName}
	}
	c, err := controller.New(acc, informers, opts)
	if err != nil {
		cancel()
		broadcaster.Shutdown()
		t.Fatalf("new controller: %v", err)
	}
	waitInformers := informers.Start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, o.Workers)
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
		waitInformers()
		broadcaster.Shutdown()
	})
	t.Cleanup(stop)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return c.HasSynced(), nil
	}); err != nil {
		t.Fatalf("controller caches not synced: %v", err)
	}
	return &RunningController{Controller: c, Metrics: opts.Metrics, Access: acc, stop: stop}
}

// Access is the admin's access to the server's LeaseCandidates and Leases in
// an API mode ("auto", "native" or "portable").
func (s *Server) Access(ctx context.Context, mode string) (access.Interface, error) {
	clients, err := access.NewClients(s.Config())
	if err != nil {
		return nil, err
	}
	return access.Detect(ctx, clients, mode)
}
