package electorsim_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	coordinationv1beta1client "k8s.io/client-go/kubernetes/typed/coordination/v1beta1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// electorServer is the model API server: Leases and LeaseCandidates of
// one namespace with kube-apiserver's rules for writes (resourceVersion
// preconditions, AlreadyExists, NotFound, new UIDs), lists and watches
// from a resourceVersion with its history, and the faults of a run.
// Events and other resources are accepted and dropped. The Leases of
// cle-controller's locks share the namespace with the Lease elected.
type electorServer struct {
	sim *electorSim
	mu  sync.Mutex
	rng *rand.Rand
	rv  int64
	// objs holds the stored objects by resource and name.
	objs map[string]map[string]runtime.Object
	// history is every change, in order; it starts at oldest (a watch
	// from before is told 410 Gone).
	history  []electorChange
	oldest   int64
	watchers map[*electorWatch]struct{}
	// errorsUntil and slowUntil are the run's server faults.
	errorRate   float64
	errorsUntil time.Time
	slowUntil   time.Time
	uids        int
	// portable: the run is in portable mode (electorportable_test.go),
	// on a server that drops the coordinated fields of Leases.
	portable bool
	// namer is the last client to name a new holder.
	namer string
}

type electorChange struct {
	resource string
	rv       int64
	event    watch.Event
}

func newElectorServer(s *electorSim, rng *rand.Rand) *electorServer {
	// Resource versions start where an etcd's might: a list never says "0",
	// which a watch would take for "from any point".
	return &electorServer{sim: s, rng: rng, rv: 1000, oldest: 1000, objs: map[string]map[string]runtime.Object{"leases": {}, "leasecandidates": {}}, watchers: map[*electorWatch]struct{}{}}
}

// client is a clientset whose requests reach the server as cut allows,
// taking their time each way. The fake clientset serves them (apply and
// watch, through its reactors) at once, holding its lock: the wait is
// around it, in electorClient, where the request's context is known.
func (v *electorServer) client(cut *cutoff) kubernetes.Interface {
	c := fake.NewClientset()
	// Discovery shows what native mode needs, and portable mode's CRD.
	c.Resources = []*metav1.APIResourceList{{GroupVersion: coordinationv1beta1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "leasecandidates", Namespaced: true, Kind: "LeaseCandidate"}}},
		{GroupVersion: access.CandidateResource.GroupVersion().String(),
			APIResources: []metav1.APIResource{{Name: access.CandidateResource.Resource, Namespaced: true, Kind: access.CandidateKind}}}}
	c.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if _, ok := a.(clienttesting.ActionImpl); ok {
			return false, nil, nil // discovery's: answered from c.Resources
		}
		obj, err := v.apply(cut, a, a.GetResource().Resource)
		return true, obj, err
	})

	c.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w, err := v.watch(cut, a)
		return true, w, err
	})
	return electorClient{Clientset: c, srv: v, cut: cut}
}

// latency is how long a request takes each way.
func (v *electorServer) latency() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := time.Duration(1+v.rng.IntN(20)) * time.Millisecond
	if time.Now().Before(v.slowUntil) || v.rng.IntN(200) == 0 {
		d += time.Duration(v.rng.IntN(3000)) * time.Millisecond
	}
	return d
}

var errCutOff = errors.New("dial tcp: connect: connection refused")

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call is one request of a client: on its way, served (do), and its answer
// on the way back, each of which may fail.
func call[T any](ctx context.Context, c electorClient, write bool, do func() (T, error)) (T, error) {
	var zero T
	v := c.srv
	if err := sleep(ctx, v.latency()); err != nil {
		return zero, err
	}
	dead, until := c.cut.state()
	if dead {
		return zero, errCutOff
	}
	if d := time.Until(until); d > 0 {
		// Cut off: the request hangs until the client gives up.
		if err := sleep(ctx, min(d, 10*time.Second)); err != nil {
			return zero, err
		}
		return zero, errCutOff
	}
	v.mu.Lock()
	failBefore, failAfter := false, false
	if time.Now().Before(v.errorsUntil) {
		failBefore, failAfter = v.rng.Float64() < v.errorRate/2, write && v.rng.Float64() < v.errorRate/2
	}
	v.mu.Unlock()
	if failBefore {
		return zero, apierrors.NewInternalError(errors.New("etcdserver: leader changed"))
	}
	obj, err := do()
	lost := func(lerr error) (T, error) {
		if w, ok := any(obj).(watch.Interface); ok && err == nil {
			w.Stop() // a watch whose answer never arrived ends
		}
		return zero, lerr
	}
	if werr := sleep(ctx, v.latency()); werr != nil {
		return lost(werr)
	}
	if dead, _ := c.cut.state(); dead {
		return lost(errCutOff)
	}
	if failAfter && err == nil {
		return lost(apierrors.NewTimeoutError("the write was applied; the answer was lost", 1))
	}
	return obj, err
}

// electorClient is a clientset whose Lease and LeaseCandidate requests take
// their time and meet the run's faults (call).
type electorClient struct {
	*fake.Clientset
	srv *electorServer
	cut *cutoff
}

func (c electorClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return electorCoordinationV1{c.Clientset.CoordinationV1(), c}
}

func (c electorClient) CoordinationV1beta1() coordinationv1beta1client.CoordinationV1beta1Interface {
	return electorCoordinationV1beta1{c.Clientset.CoordinationV1beta1(), c}
}

type electorCoordinationV1 struct {
	coordinationv1client.CoordinationV1Interface
	c electorClient
}

func (x electorCoordinationV1) Leases(ns string) coordinationv1client.LeaseInterface {
	return electorLeases{x.CoordinationV1Interface.Leases(ns), x.c}
}

type electorCoordinationV1beta1 struct {
	coordinationv1beta1client.CoordinationV1beta1Interface
	c electorClient
}

func (x electorCoordinationV1beta1) LeaseCandidates(ns string) coordinationv1beta1client.LeaseCandidateInterface {
	return electorCandidates{x.CoordinationV1beta1Interface.LeaseCandidates(ns), x.c}
}

type electorLeases struct {
	coordinationv1client.LeaseInterface
	c electorClient
}

func (l electorLeases) Get(ctx context.Context, name string, o metav1.GetOptions) (*coordinationv1.Lease, error) {
	return call(ctx, l.c, false, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Get(ctx, name, o) })
}

func (l electorLeases) List(ctx context.Context, o metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	return call(ctx, l.c, false, func() (*coordinationv1.LeaseList, error) { return l.LeaseInterface.List(ctx, o) })
}

func (l electorLeases) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return call(ctx, l.c, false, func() (watch.Interface, error) { return l.LeaseInterface.Watch(ctx, o) })
}

func (l electorLeases) Create(ctx context.Context, lease *coordinationv1.Lease, o metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return call(ctx, l.c, true, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Create(ctx, lease, o) })
}

func (l electorLeases) Update(ctx context.Context, lease *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return call(ctx, l.c, true, func() (*coordinationv1.Lease, error) { return l.LeaseInterface.Update(ctx, lease, o) })
}

func (l electorLeases) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	_, err := call(ctx, l.c, true, func() (struct{}, error) { return struct{}{}, l.LeaseInterface.Delete(ctx, name, o) })
	return err
}

type electorCandidates struct {
	coordinationv1beta1client.LeaseCandidateInterface
	c electorClient
}

func (l electorCandidates) Get(ctx context.Context, name string, o metav1.GetOptions) (*coordinationv1beta1.LeaseCandidate, error) {
	return call(ctx, l.c, false, func() (*coordinationv1beta1.LeaseCandidate, error) {
		return l.LeaseCandidateInterface.Get(ctx, name, o)
	})
}

func (l electorCandidates) List(ctx context.Context, o metav1.ListOptions) (*coordinationv1beta1.LeaseCandidateList, error) {
	return call(ctx, l.c, false, func() (*coordinationv1beta1.LeaseCandidateList, error) { return l.LeaseCandidateInterface.List(ctx, o) })
}

func (l electorCandidates) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return call(ctx, l.c, false, func() (watch.Interface, error) { return l.LeaseCandidateInterface.Watch(ctx, o) })
}

func (l electorCandidates) Create(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate, o metav1.CreateOptions) (*coordinationv1beta1.LeaseCandidate, error) {
	return call(ctx, l.c, true, func() (*coordinationv1beta1.LeaseCandidate, error) {
		return l.LeaseCandidateInterface.Create(ctx, lc, o)
	})
}

func (l electorCandidates) Update(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate, o metav1.UpdateOptions) (*coordinationv1beta1.LeaseCandidate, error) {
	return call(ctx, l.c, true, func() (*coordinationv1beta1.LeaseCandidate, error) {
		return l.LeaseCandidateInterface.Update(ctx, lc, o)
	})
}

func (l electorCandidates) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	_, err := call(ctx, l.c, true, func() (struct{}, error) { return struct{}{}, l.LeaseCandidateInterface.Delete(ctx, name, o) })
	return err
}

func (v *electorServer) apply(cut *cutoff, a clienttesting.Action, res string) (runtime.Object, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	store, ok := v.objs[res]
	gr := a.GetResource().GroupResource()
	if !ok {
		if a.GetVerb() == "create" {
			return a.(clienttesting.CreateAction).GetObject(), nil // an Event
		}
		return nil, apierrors.NewNotFound(gr, "")
	}
	switch a.GetVerb() {
	case "get":
		name := a.(clienttesting.GetAction).GetName()
		obj, ok := store[name]
		if !ok {
			return nil, apierrors.NewNotFound(gr, name)
		}
		return obj.DeepCopyObject(), nil
	case "list":
		r := a.(clienttesting.ListAction).GetListRestrictions()
		return v.list(res, r.Labels, r.Fields), nil
	case "create":
		obj := a.(clienttesting.CreateAction).GetObject().DeepCopyObject()
		m, _ := meta.Accessor(obj)
		if ca, ok := a.(clienttesting.CreateActionImpl); ok && len(ca.CreateOptions.DryRun) > 0 {
			return obj, nil // cle-controller's probe of Lease spec.strategy: kept, not stored
		}
		if _, ok := store[m.GetName()]; ok {
			return nil, apierrors.NewAlreadyExists(gr, m.GetName())
		}
		v.gateOff(obj)
		v.named(cut, nil, obj)
		return v.create(res, obj), nil
	case "update":
		obj := a.(clienttesting.UpdateAction).GetObject().DeepCopyObject()
		m, _ := meta.Accessor(obj)
		cur, ok := store[m.GetName()]
		if !ok {
			return nil, apierrors.NewNotFound(gr, m.GetName())
		}
		cm, _ := meta.Accessor(cur)
		if rv := m.GetResourceVersion(); rv != "" && rv != cm.GetResourceVersion() {
			return nil, apierrors.NewConflict(gr, m.GetName(), errors.New("the object has been modified"))
		}
		if lc, ok := obj.(*coordinationv1beta1.LeaseCandidate); ok && lc.Spec.LeaseName != cur.(*coordinationv1beta1.LeaseCandidate).Spec.LeaseName {
			return nil, apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "LeaseCandidate"}, m.GetName(), nil)
		}
		m.SetUID(cm.GetUID())
		m.SetCreationTimestamp(cm.GetCreationTimestamp())
		v.gateOff(obj)
		v.named(cut, cur, obj)
		return v.store(res, m.GetName(), obj, watch.Modified), nil
	case "delete":
		d := a.(clienttesting.DeleteAction)
		cur, ok := store[d.GetName()]
		if !ok {
			return nil, apierrors.NewNotFound(gr, d.GetName())
		}
		cm, _ := meta.Accessor(cur)
		if pre := d.GetDeleteOptions().Preconditions; pre != nil {
			if pre.UID != nil && *pre.UID != cm.GetUID() || pre.ResourceVersion != nil && *pre.ResourceVersion != cm.GetResourceVersion() {
				return nil, apierrors.NewConflict(gr, d.GetName(), errors.New("precondition failed"))
			}
		}
		v.remove(res, d.GetName())
		return nil, nil
	}
	return nil, apierrors.NewMethodNotSupported(gr, a.GetVerb())
}

// gateOff drops, in portable mode, the fields of a Lease that a server
// with the CoordinatedLeaderElection gate off does not keep.
func (v *electorServer) gateOff(obj runtime.Object) {
	if l, ok := obj.(*coordinationv1.Lease); ok && v.portable {
		l.Spec.Strategy, l.Spec.PreferredHolder = nil, nil
	}
}

// create stores obj as a new object: a new UID, its creation time; srv.mu
// is held.
func (v *electorServer) create(res string, obj runtime.Object) runtime.Object {
	m, _ := meta.Accessor(obj)
	v.uids++
	m.SetUID(types.UID(fmt.Sprintf("uid-%d", v.uids)))
	m.SetCreationTimestamp(metav1.Now())
	m.SetNamespace(simNS)
	return v.store(res, m.GetName(), obj, watch.Added)
}

// remove deletes the stored object name, if there is one, and tells the
// watches; it reports whether there was one. srv.mu is held.
func (v *electorServer) remove(res, name string) bool {
	cur, ok := v.objs[res][name]
	if !ok {
		return false
	}
	delete(v.objs[res], name)
	v.rv++
	gone := cur.DeepCopyObject()
	gm, _ := meta.Accessor(gone)
	gm.SetResourceVersion(strconv.FormatInt(v.rv, 10))
	v.publish(res, watch.Deleted, gone)
	return true
}

// store keeps obj under a new resourceVersion and tells the watches.
func (v *electorServer) store(res, name string, obj runtime.Object, t watch.EventType) runtime.Object {
	v.rv++
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatInt(v.rv, 10))
	v.objs[res][name] = obj
	v.publish(res, t, obj.DeepCopyObject())
	return obj.DeepCopyObject()
}

func (v *electorServer) publish(res string, t watch.EventType, obj runtime.Object) {
	c := electorChange{resource: res, rv: v.rv, event: watch.Event{Type: t, Object: obj}}
	v.history = append(v.history, c)
	for w := range v.watchers {
		w.offer(c)
	}
}

func (v *electorServer) list(res string, ls labels.Selector, fs fields.Selector) runtime.Object {
	names := make([]string, 0, len(v.objs[res]))
	for name := range v.objs[res] {
		names = append(names, name)
	}
	slices.Sort(names)
	rv := strconv.FormatInt(v.rv, 10)
	var out []runtime.Object
	for _, name := range names {
		obj := v.objs[res][name]
		if matches(obj, ls, fs) {
			out = append(out, obj.DeepCopyObject())
		}
	}
	if res == "leases" {
		l := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
		for _, o := range out {
			l.Items = append(l.Items, *o.(*coordinationv1.Lease))
		}
		return l
	}
	l := &coordinationv1beta1.LeaseCandidateList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for _, o := range out {
		l.Items = append(l.Items, *o.(*coordinationv1beta1.LeaseCandidate))
	}
	return l
}

func matches(obj runtime.Object, ls labels.Selector, fs fields.Selector) bool {
	m, _ := meta.Accessor(obj)
	if ls != nil && !ls.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	return fs == nil || fs.Matches(fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()})
}

// watch starts a watch from the request's resourceVersion: the changes
// since then first, every later one as it happens.
func (v *electorServer) watch(cut *cutoff, a clienttesting.Action) (watch.Interface, error) {
	r := a.(clienttesting.WatchAction).GetWatchRestrictions()
	res := a.GetResource().Resource
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.objs[res]; !ok {
		return watch.NewEmptyWatch(), nil
	}
	w := &electorWatch{srv: v, cut: cut, resource: res, labels: r.Labels, fields: r.Fields, out: make(chan watch.Event), wake: make(chan struct{}, 1), stop: make(chan struct{})}
	if r.ResourceVersion == "" || r.ResourceVersion == "0" {
		// From any point: the objects as they are now, then every change.
		for _, name := range slices.Sorted(maps.Keys(v.objs[res])) {
			w.offer(electorChange{resource: res, rv: v.rv, event: watch.Event{Type: watch.Added, Object: v.objs[res][name]}})
		}
	} else {
		from, err := strconv.ParseInt(r.ResourceVersion, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if from < v.oldest {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, v.oldest))
		}
		for _, c := range v.history {
			if c.rv > from {
				w.offer(c)
			}
		}
	}
	v.watchers[w] = struct{}{}
	v.sim.wg.Go(w.pump)
	return w, nil
}

// partition cuts the client off for d: its requests hang and fail, its
// watches deliver nothing until it ends.
func (v *electorServer) partition(cut *cutoff, d time.Duration) {
	cut.mu.Lock()
	cut.partitioned = time.Now().Add(d)
	cut.mu.Unlock()
}

// named records the client that wrote a Lease naming a new holder; srv.mu
// is held.
func (v *electorServer) named(cut *cutoff, cur, obj runtime.Object) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name != simLease || ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		return
	}
	if c, ok := cur.(*coordinationv1.Lease); ok && ptr.Deref(c.Spec.HolderIdentity, "") == ptr.Deref(l.Spec.HolderIdentity, "") {
		return
	}
	v.namer = cut.who
}

// lastNamer is the last client to name a new holder.
func (v *electorServer) lastNamer() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.namer
}

// candidates are the stored LeaseCandidates of these names.
func (v *electorServer) candidates(names []string) []*coordinationv1beta1.LeaseCandidate {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []*coordinationv1beta1.LeaseCandidate
	for _, name := range names {
		if obj, ok := v.objs["leasecandidates"][name]; ok {
			out = append(out, obj.DeepCopyObject().(*coordinationv1beta1.LeaseCandidate))
		}
	}
	return out
}

// deleteLease deletes the Lease, if there is one, and with recreate
// creates it again at once without a holder.
func (v *electorServer) deleteLease(recreate bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.remove("leases", simLease) && recreate {
		v.create("leases", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: simLease}})
	}
}

// annotate sets an annotation of the LeaseCandidate name, if there is one,
// as an operator's kubectl would.
func (v *electorServer) annotate(name, key, value string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, ok := v.objs["leasecandidates"][name]
	if !ok {
		return
	}
	lc := cur.DeepCopyObject().(*coordinationv1beta1.LeaseCandidate)
	if lc.Annotations == nil {
		lc.Annotations = map[string]string{}
	}
	lc.Annotations[key] = value
	v.store("leasecandidates", name, lc, watch.Modified)
}

func (v *electorServer) setErrors(rate float64, d time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errorRate, v.errorsUntil = rate, time.Now().Add(d)
}

func (v *electorServer) setSlow(d time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.slowUntil = time.Now().Add(d)
}

// closeWatches ends every watch; expire also drops the history, so that
// a watch started again from where it was is told 410 Gone and relists.
func (v *electorServer) closeWatches(expire bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if expire {
		v.history, v.oldest = nil, v.rv
	}
	for w := range v.watchers {
		w.end()
	}
	clear(v.watchers)
}

// electorWatch is one watch: its changes wait in a queue that its pump
// delivers, in order, as the watcher reads them; a partition of its client
// holds them back.
type electorWatch struct {
	srv      *electorServer
	cut      *cutoff
	resource string
	labels   labels.Selector
	fields   fields.Selector
	out      chan watch.Event
	wake     chan struct{}
	stop     chan struct{}
	once     sync.Once
	// queue is under srv.mu.
	queue []watch.Event
}

// offer queues c if the watch wants it; srv.mu is held.
func (w *electorWatch) offer(c electorChange) {
	if c.resource != w.resource || !matches(c.event.Object, w.labels, w.fields) {
		return
	}
	w.queue = append(w.queue, watch.Event{Type: c.event.Type, Object: c.event.Object.DeepCopyObject()})
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *electorWatch) pump() {
	defer close(w.out)
	for {
		w.srv.mu.Lock()
		var ev *watch.Event
		if len(w.queue) > 0 {
			ev = &w.queue[0]
			w.queue = w.queue[1:]
		}
		w.srv.mu.Unlock()
		if ev == nil {
			select {
			case <-w.wake:
				continue
			case <-w.stop:
				return
			}
		}
		// Each event takes a moment; a partition holds them all back.
		lag := w.srv.latency()
		if _, until := w.cut.state(); time.Until(until) > 0 {
			lag = time.Until(until) + lag
		}
		select {
		case <-time.After(lag):
		case <-w.stop:
			return
		}
		select {
		case w.out <- *ev:
		case <-w.stop:
			return
		}
	}
}

func (w *electorWatch) end() { w.once.Do(func() { close(w.stop) }) }

func (w *electorWatch) Stop() {
	w.end()
	w.srv.mu.Lock()
	delete(w.srv.watchers, w)
	w.srv.mu.Unlock()
}

func (w *electorWatch) ResultChan() <-chan watch.Event { return w.out }
