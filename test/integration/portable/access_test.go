package portable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/test/integration/framework"
)

// detect runs access.Detect against the test server.
func detect(t *testing.T, mode string) (access.Interface, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	clients, err := access.NewClients(server.Config())
	if err != nil {
		t.Fatal(err)
	}
	return access.Detect(ctx, clients, mode)
}

func mustDetect(t *testing.T, mode string) access.Interface {
	t.Helper()
	acc, err := detect(t, mode)
	if err != nil {
		t.Fatalf("Detect(%s): %v", mode, err)
	}
	return acc
}

// TestAutoDetectPicksPortable: the gate is off, so the server drops Lease
// spec.strategy, and the CRD is installed.
func TestAutoDetectPicksPortable(t *testing.T) {
	installCRD(t)
	if acc := mustDetect(t, access.ModeAuto); acc.Mode() != access.ModePortable {
		t.Errorf("auto chose %s on a gate-off server, want portable", acc.Mode())
	}
	if _, err := detect(t, string(access.ModeNative)); !errors.Is(err, access.ErrNativeUnavailable) {
		t.Errorf("explicit native on a gate-off server: err = %v, want ErrNativeUnavailable", err)
	}
}

func candidate(name, lease, binary, emulation string, strategy coordinationv1.CoordinatedLeaseStrategy) *coordinationv1beta1.LeaseCandidate {
	return &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        lease,
			BinaryVersion:    binary,
			EmulationVersion: emulation,
			Strategy:         strategy,
			RenewTime:        ptr.To(metav1.NewMicroTime(time.Now())),
		},
	}
}

// TestCandidateRoundTrip writes candidates through the access layer and reads
// them back, through the client and through the raw custom resource.
func TestCandidateRoundTrip(t *testing.T) {
	installCRD(t)
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	candidates := mustDetect(t, string(access.ModePortable)).LeaseCandidates(ns)

	in := candidate("c1", "l", "1.36.0", "1.35.0", coordinationv1.OldestEmulationVersion)
	in.Labels = map[string]string{"app": "x"}
	created, err := candidates.Create(ctx, in)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Errorf("created candidate lacks server metadata: %+v", created.ObjectMeta)
	}
	if !created.Spec.RenewTime.Equal(ptr.To(metav1.NewMicroTime(in.Spec.RenewTime.Truncate(time.Microsecond)))) {
		t.Errorf("renewTime = %v, want %v at microsecond precision", created.Spec.RenewTime, in.Spec.RenewTime)
	}
	raw, err := dynamicClient(t).Resource(candidatesGVR).Namespace(ns).Get(ctx, "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("raw Get: %v", err)
	}
	if raw.GetUID() != created.UID || raw.GetLabels()["app"] != "x" {
		t.Errorf("raw object %v does not match the created one", raw.Object)
	}

	ping := metav1.NewMicroTime(time.Now().Add(time.Second).Truncate(time.Microsecond))
	created.Spec.PingTime = &ping
	updated, err := candidates.Update(ctx, created)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if !updated.Spec.PingTime.Equal(&ping) || updated.ResourceVersion == created.ResourceVersion {
		t.Errorf("updated pingTime = %v rv %s, want %v and a new resourceVersion", updated.Spec.PingTime, updated.ResourceVersion, ping)
	}
	// The write was conditional: the old resourceVersion conflicts.
	if _, err := candidates.Update(ctx, created); !apierrors.IsConflict(err) {
		t.Errorf("Update with a stale resourceVersion: err = %v, want Conflict", err)
	}
	// An invalid candidate written through the layer is refused by the CRD.
	bad := updated.DeepCopy()
	bad.Spec.EmulationVersion = "1.37.0"
	if _, err := candidates.Update(ctx, bad); !apierrors.IsInvalid(err) {
		t.Errorf("Update with emulationVersion > binaryVersion: err = %v, want Invalid", err)
	}
	// Deletes honour preconditions.
	if err := candidates.Delete(ctx, "c1", &metav1.Preconditions{ResourceVersion: &created.ResourceVersion}); !apierrors.IsConflict(err) {
		t.Errorf("Delete with a stale resourceVersion precondition: err = %v, want Conflict", err)
	}
	if err := candidates.Delete(ctx, "c1", &metav1.Preconditions{UID: &updated.UID, ResourceVersion: &updated.ResourceVersion}); err != nil {
		t.Errorf("Delete with current preconditions: %v", err)
	}
	if _, err := candidates.Get(ctx, "c1"); !apierrors.IsNotFound(err) {
		t.Errorf("Get after delete: err = %v, want NotFound", err)
	}
}

// TestPrinterColumns reads LeaseCandidates as a Table, as kubectl get does.
func TestPrinterColumns(t *testing.T) {
	installCRD(t)
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	candidates := mustDetect(t, string(access.ModePortable)).LeaseCandidates(ns)
	if _, err := candidates.Create(ctx, candidate("a", "my-lease", "1.36.1", "1.35.0", coordinationv1.OldestEmulationVersion)); err != nil {
		t.Fatal(err)
	}
	b := candidate("b", "my-lease", "1.36.0", "", "cle.dev/Priority")
	b.Spec.RenewTime = nil
	if _, err := candidates.Create(ctx, b); err != nil {
		t.Fatal(err)
	}

	raw, err := server.Client().Discovery().RESTClient().Get().
		AbsPath("/apis/cle.dev/v1beta1/namespaces", ns, "leasecandidates").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		Do(ctx).Raw()
	if err != nil {
		t.Fatalf("get the Table: %v", err)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(raw, table); err != nil {
		t.Fatalf("decode the Table: %v", err)
	}
	wantColumns := []struct{ name, typ string }{
		{"Name", "string"}, {"LeaseName", "string"}, {"Strategy", "string"}, {"Binary", "string"},
		{"Emulation", "string"}, {"Renewed", "date"}, {"Age", "date"},
	}
	if len(table.ColumnDefinitions) != len(wantColumns) {
		t.Fatalf("columns = %+v, want %v", table.ColumnDefinitions, wantColumns)
	}
	for i, want := range wantColumns {
		if got := table.ColumnDefinitions[i]; got.Name != want.name || got.Type != want.typ {
			t.Errorf("column %d = %s (%s), want %s (%s)", i, got.Name, got.Type, want.name, want.typ)
		}
	}
	rows := map[string][]any{}
	for _, r := range table.Rows {
		rows[fmt.Sprint(r.Cells[0])] = r.Cells
	}
	if len(rows) != 2 {
		t.Fatalf("table rows = %v, want a and b", rows)
	}
	// Dates are shown as ages ("3s"); a missing field is an empty cell.
	check := func(name string, want []any) {
		t.Helper()
		got := rows[name]
		for i, w := range want {
			switch {
			case w == "<age>":
				if s, ok := got[i].(string); !ok || s == "" || s == "<invalid>" {
					t.Errorf("row %s, %s = %#v, want an age", name, wantColumns[i].name, got[i])
				}
			case got[i] != w:
				t.Errorf("row %s, %s = %#v, want %#v", name, wantColumns[i].name, got[i], w)
			}
		}
	}
	check("a", []any{"a", "my-lease", "OldestEmulationVersion", "1.36.1", "1.35.0", "<age>", "<age>"})
	check("b", []any{"b", "my-lease", "cle.dev/Priority", "1.36.0", nil, nil, "<age>"})
}

// TestLeaseAnnotationsSurviveRenewal plays a holder that renews its Lease
// through the access layer: the annotations carrying strategy and preferred
// holder must be on the stored object after every renewal.
func TestLeaseAnnotationsSurviveRenewal(t *testing.T) {
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	acc, err := access.NewPortable(mustClients(t))
	if err != nil {
		t.Fatal(err)
	}
	leases := acc.Leases(ns)
	rawLeases := server.Client().CoordinationV1().Leases(ns)
	wantAnnotations := func(strategy, preferred string) {
		t.Helper()
		raw, err := rawLeases.Get(ctx, "l", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := raw.Annotations[access.StrategyAnnotation]; got != strategy {
			t.Errorf("stored %s = %q, want %q", access.StrategyAnnotation, got, strategy)
		}
		got, found := raw.Annotations[access.PreferredHolderAnnotation]
		if got != preferred || found != (preferred != "") {
			t.Errorf("stored %s = %q (present %v), want %q", access.PreferredHolderAnnotation, got, found, preferred)
		}
	}

	now := metav1.NewMicroTime(time.Now())
	if _, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "l"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("a"),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &now,
			RenewTime:            &now,
			Strategy:             ptr.To(coordinationv1.OldestEmulationVersion),
			PreferredHolder:      ptr.To("b"),
		},
	}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	wantAnnotations("OldestEmulationVersion", "b")

	for i := range 3 {
		l, err := leases.Get(ctx, "l")
		if err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(l.Spec.Strategy, "") != coordinationv1.OldestEmulationVersion || ptr.Deref(l.Spec.PreferredHolder, "") != "b" {
			t.Fatalf("Lease read through the layer: spec = %+v, want strategy and preferredHolder from the annotations", l.Spec)
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		if _, err := leases.Update(ctx, l); err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		wantAnnotations("OldestEmulationVersion", "b")
	}

	// The holder hands over to b: preferredHolder cleared.
	l, err := leases.Get(ctx, "l")
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity, l.Spec.PreferredHolder = ptr.To("b"), nil
	if _, err := leases.Update(ctx, l); err != nil {
		t.Fatalf("hand over: %v", err)
	}
	wantAnnotations("OldestEmulationVersion", "")
}

func mustClients(t *testing.T) access.Clients {
	t.Helper()
	clients, err := access.NewClients(server.Config())
	if err != nil {
		t.Fatal(err)
	}
	return clients
}

// TestControllerElectsInPortableMode runs cle's election controller in
// portable mode on CRD candidates.
func TestControllerElectsInPortableMode(t *testing.T) {
	installCRD(t)
	ns := server.CreateNamespace(t)
	rc := server.StartController(t, framework.ControllerOptions{APIMode: string(access.ModePortable), Namespaces: []string{ns}})
	if rc.Access.Mode() != access.ModePortable {
		t.Fatalf("controller runs in %s mode, want portable", rc.Access.Mode())
	}
	candidates := rc.Access.LeaseCandidates(ns)
	rawLeases := server.Client().CoordinationV1().Leases(ns)
	waitRaw := func(what string, cond func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
		t.Helper()
		var last *coordinationv1.Lease
		err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := rawLeases.Get(ctx, "portable", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			last = l
			return cond(l), nil
		})
		if err != nil {
			t.Fatalf("Lease: %s not reached (last: %+v): %v", what, last, err)
		}
		return last
	}

	if _, err := candidates.Create(t.Context(), candidate("a", "portable", "1.36.0", "1.36.0", coordinationv1.OldestEmulationVersion)); err != nil {
		t.Fatal(err)
	}
	lease := waitRaw("holder a", func(l *coordinationv1.Lease) bool { return ptr.Deref(l.Spec.HolderIdentity, "") == "a" })
	if got := lease.Annotations[access.StrategyAnnotation]; got != string(coordinationv1.OldestEmulationVersion) {
		t.Errorf("elected Lease %s = %q, want OldestEmulationVersion", access.StrategyAnnotation, got)
	}

	if _, err := candidates.Create(t.Context(), candidate("b", "portable", "1.36.0", "1.35.0", coordinationv1.OldestEmulationVersion)); err != nil {
		t.Fatal(err)
	}
	framework.AnswerPings(t, candidates, "b")
	lease = waitRaw("preferred holder b", func(l *coordinationv1.Lease) bool { return l.Annotations[access.PreferredHolderAnnotation] == "b" })
	if ptr.Deref(lease.Spec.HolderIdentity, "") != "a" {
		t.Errorf("holder = %q, want a until it hands over", ptr.Deref(lease.Spec.HolderIdentity, ""))
	}
	if got := lease.Annotations[access.StrategyAnnotation]; got != string(coordinationv1.OldestEmulationVersion) {
		t.Errorf("after preferring b, %s = %q, want it kept", access.StrategyAnnotation, got)
	}
}
