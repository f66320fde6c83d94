package kubectlcle

import (
	"slices"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/strategy"
)

// GroupName is the API group of what kubectl cle prints with -o json|yaml and
// the templates: objects of its own, never stored in a cluster, named like
// API objects so that they say what they are (kind, apiVersion) and can be
// versioned.
const GroupName = "kubectl.cle.dev"

// SchemeGroupVersion is the version of the objects kubectl cle prints.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// The kinds kubectl cle prints.
const (
	KindLeaseStatus      = "LeaseStatus"
	KindLeaseStatusList  = "LeaseStatusList"
	KindLeaseDescription = "LeaseDescription"
	KindLeaseChange      = "LeaseChange"
)

// Scheme knows the kinds kubectl cle prints, for printers that look kinds
// up (cli-runtime's TypeSetter).
var Scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypeWithName(SchemeGroupVersion.WithKind(KindLeaseStatus), &LeaseStatus{})
	s.AddKnownTypeWithName(SchemeGroupVersion.WithKind(KindLeaseStatusList), &LeaseStatusList{})
	s.AddKnownTypeWithName(SchemeGroupVersion.WithKind(KindLeaseDescription), &LeaseDescription{})
	s.AddKnownTypeWithName(SchemeGroupVersion.WithKind(KindLeaseChange), &LeaseChange{})
	return s
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: SchemeGroupVersion.String(), Kind: kind}
}

// LeaseStatus is one row of `kubectl cle status`, and what -o json|yaml
// prints for it.
type LeaseStatus struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string            `json:"namespace"`
	Name            string            `json:"name"`
	APIMode         access.Mode       `json:"apiMode"`
	Strategy        string            `json:"strategy,omitempty"`
	Holder          string            `json:"holder,omitempty"`
	PreferredHolder string            `json:"preferredHolder,omitempty"`
	Best            string            `json:"best,omitempty"`
	Candidates      int               `json:"candidates"`
	Term            int32             `json:"term"`
	State           State             `json:"state"`
	Why             string            `json:"why"`
	Created         *metav1.Time      `json:"creationTimestamp,omitempty"`
	RenewTime       *metav1.MicroTime `json:"renewTime,omitempty"`
}

// LeaseStatusList is what `kubectl cle status` prints with -o json|yaml and
// the templates.
type LeaseStatusList struct {
	metav1.TypeMeta `json:",inline"`
	// ElectionController is who runs coordinated elections, from the
	// election controllers' lock Lease; nil when it was not looked up.
	ElectionController *ElectionControllerStatus `json:"electionController,omitempty"`
	Items              []LeaseStatus             `json:"items"`
}

// The states of ElectionControllerStatus.
const (
	// ControllerActing: the lock's holder renews it.
	ControllerActing = "acting"
	// ControllerNone: nobody holds the lock, or its holder stopped renewing.
	ControllerNone = "none"
	// ControllerUnknown: the lock could not be read.
	ControllerUnknown = "unknown"
)

// ElectionControllerStatus is which election controller acts on coordinated
// elections, as the election controllers' lock Lease in kube-system tells.
type ElectionControllerStatus struct {
	// Lock is the lock Lease, namespace/name.
	Lock string `json:"lock"`
	// State is ControllerActing, ControllerNone or ControllerUnknown.
	State string `json:"state"`
	// Controller is access.ActingCle or access.ActingKubeAPIServer while one
	// acts.
	Controller string `json:"controller,omitempty"`
	// Holder is the lock's holderIdentity, also when it stopped renewing.
	Holder string `json:"holder,omitempty"`
	// Since is when the holder acquired the lock.
	Since *metav1.Time `json:"since,omitempty"`
	// RenewTime is when the holder last renewed the lock.
	RenewTime *metav1.MicroTime `json:"renewTime,omitempty"`
	// Reason says why nobody acts, or why that is unknown.
	Reason string `json:"reason,omitempty"`
	// CleStrategies is, in native mode, cle-controller's own lock
	// (kube-system/cle-controller): its holder elects the Leases of cle's
	// strategies (cle.dev/...) whoever holds Lock, which kube-apiserver's
	// controller holds to elect those of OldestEmulationVersion. Nil when
	// that Lease does not exist or cannot be read.
	CleStrategies *ElectionControllerStatus `json:"cleStrategies,omitempty"`
}

// CandidateStatus is one candidate of `kubectl cle describe`.
type CandidateStatus struct {
	// Rank is the candidate's place in the strategy's order, from 1; 0 for
	// a candidate that is not ranked (see Excluded).
	Rank             int               `json:"rank,omitempty"`
	Name             string            `json:"name"`
	BinaryVersion    string            `json:"binaryVersion"`
	EmulationVersion string            `json:"emulationVersion"`
	Strategy         string            `json:"strategy"`
	Priority         string            `json:"priority,omitempty"`
	RenewTime        *metav1.MicroTime `json:"renewTime,omitempty"`
	PingTime         *metav1.MicroTime `json:"pingTime,omitempty"`
	// Ping is "pending" when the candidate was pinged after its last
	// renewal, "answered" when it renewed since, "" if never pinged.
	Ping string `json:"ping,omitempty"`
	// Roles: holder, preferred, best.
	Roles []string `json:"roles,omitempty"`
	// Excluded says why the candidate takes no part: expired,
	// unresponsive (a ping unanswered), or invalid with the reason.
	Excluded string `json:"excluded,omitempty"`
	// Pod, Container and Instance are where the candidate's process runs
	// and which process it is, as it registered them for the proof of
	// death.
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	Instance  string `json:"instance,omitempty"`
}

// EventStatus is one Event of a Lease.
type EventStatus struct {
	Time    metav1.Time `json:"time"`
	Type    string      `json:"type"`
	Reason  string      `json:"reason"`
	From    string      `json:"from"`
	Message string      `json:"message"`
}

// LeaseDescription is what `kubectl cle describe` shows.
type LeaseDescription struct {
	metav1.TypeMeta `json:",inline"`
	Status          LeaseStatus `json:"status"`
	// ElectionController is who runs coordinated elections; nil when it
	// was not looked up.
	ElectionController *ElectionControllerStatus `json:"electionController,omitempty"`
	Candidates         []CandidateStatus         `json:"candidates"`
	Events             []EventStatus             `json:"events"`
}

// LeaseChange is what `kubectl cle watch` prints with -o json|yaml and the
// templates: one object each time it reports a Lease.
type LeaseChange struct {
	metav1.TypeMeta `json:",inline"`
	// Time is when the change was seen.
	Time metav1.MicroTime `json:"time"`
	// Changes are what changed, as the lines of the default output say it
	// (without their time, Lease and state); the first report of a Lease
	// gives its current holder, preferred holder and candidates.
	Changes []string `json:"changes"`
	// Lease is the Lease's status after the change.
	Lease LeaseStatus `json:"lease"`
}

// Status turns a Summary into a status row.
func Status(s *Summary, mode access.Mode) LeaseStatus {
	st := LeaseStatus{
		TypeMeta:        typeMeta(KindLeaseStatus),
		Namespace:       s.Key.Namespace,
		Name:            s.Key.Name,
		APIMode:         mode,
		Strategy:        string(s.Strategy),
		Holder:          s.Holder,
		PreferredHolder: s.PreferredHolder,
		Best:            s.Best,
		Candidates:      s.Candidates(),
		Term:            s.Term,
		State:           s.State,
		Why:             s.Why,
	}
	if s.Lease != nil {
		st.Created = ptr.To(s.Lease.CreationTimestamp)
		st.RenewTime = s.Lease.Spec.RenewTime
	}
	return st
}

// NewLeaseStatusList returns the list of rows, and the election controller
// (nil to leave it out).
func NewLeaseStatusList(rows []LeaseStatus, controller *ElectionControllerStatus) *LeaseStatusList {
	if rows == nil {
		rows = []LeaseStatus{}
	}
	return &LeaseStatusList{TypeMeta: typeMeta(KindLeaseStatusList), ElectionController: controller, Items: rows}
}

// Describe turns a Summary and the Lease's Events into a description.
func Describe(s *Summary, mode access.Mode, events []corev1.Event) *LeaseDescription {
	d := &LeaseDescription{TypeMeta: typeMeta(KindLeaseDescription), Status: Status(s, mode), Candidates: []CandidateStatus{}, Events: []EventStatus{}}
	roles := func(name string) []string {
		var r []string
		for _, role := range []struct{ who, what string }{{s.Holder, "holder"}, {s.PreferredHolder, "preferred"}, {s.Best, "best"}} {
			if role.who == name {
				r = append(r, role.what)
			}
		}
		return r
	}
	add := func(rank int, lc *coordinationv1beta1.LeaseCandidate, excluded string) {
		c := CandidateStatus{
			Rank:             rank,
			Name:             lc.Name,
			BinaryVersion:    lc.Spec.BinaryVersion,
			EmulationVersion: lc.Spec.EmulationVersion,
			Strategy:         string(lc.Spec.Strategy),
			Priority:         lc.Annotations[strategy.PriorityAnnotation],
			RenewTime:        lc.Spec.RenewTime,
			PingTime:         lc.Spec.PingTime,
			Ping:             PingState(lc),
			Roles:            roles(lc.Name),
			Excluded:         excluded,
			Pod:              lc.Annotations[access.PodAnnotation],
			Container:        lc.Annotations[access.ContainerAnnotation],
			Instance:         lc.Annotations[access.InstanceAnnotation],
		}
		d.Candidates = append(d.Candidates, c)
	}
	for i, lc := range s.Ranked {
		add(i+1, lc, "")
	}
	for _, inv := range s.Invalid {
		add(0, inv.Candidate, "invalid: "+inv.Reason.Error())
	}
	for _, lc := range s.Unresponsive {
		add(0, lc, "unresponsive: no renewal since its ping")
	}
	for _, lc := range s.Expired {
		add(0, lc, "expired")
	}
	for i := range events {
		e := &events[i]
		d.Events = append(d.Events, EventStatus{
			Time: metav1.NewTime(EventTime(e)), Type: e.Type, Reason: e.Reason, From: EventSource(e), Message: e.Message,
		})
	}
	return d
}

// candidateAge is how long ago a candidate renewed, for display.
func candidateAge(c *CandidateStatus, now time.Time) string {
	if c.RenewTime == nil {
		return "<never>"
	}
	return age(c.RenewTime.Time, now)
}

// DeepCopyInto copies s into out.
func (s *LeaseStatus) DeepCopyInto(out *LeaseStatus) {
	*out = *s
	if s.Created != nil {
		out.Created = s.Created.DeepCopy()
	}
	if s.RenewTime != nil {
		out.RenewTime = s.RenewTime.DeepCopy()
	}
}

// DeepCopy returns a copy of s that shares nothing with it.
func (s *LeaseStatus) DeepCopy() *LeaseStatus {
	if s == nil {
		return nil
	}
	out := new(LeaseStatus)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (s *LeaseStatus) DeepCopyObject() runtime.Object {
	if c := s.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopy returns a copy of e that shares nothing with it.
func (e *ElectionControllerStatus) DeepCopy() *ElectionControllerStatus {
	if e == nil {
		return nil
	}
	out := *e
	out.CleStrategies = e.CleStrategies.DeepCopy()
	if e.Since != nil {
		out.Since = e.Since.DeepCopy()
	}
	if e.RenewTime != nil {
		out.RenewTime = e.RenewTime.DeepCopy()
	}
	return &out
}

// DeepCopy returns a copy of l that shares nothing with it.
func (l *LeaseStatusList) DeepCopy() *LeaseStatusList {
	if l == nil {
		return nil
	}
	out := &LeaseStatusList{TypeMeta: l.TypeMeta, ElectionController: l.ElectionController.DeepCopy()}
	if l.Items != nil {
		out.Items = make([]LeaseStatus, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *LeaseStatusList) DeepCopyObject() runtime.Object {
	if c := l.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies c into out.
func (c *CandidateStatus) DeepCopyInto(out *CandidateStatus) {
	*out = *c
	if c.RenewTime != nil {
		out.RenewTime = c.RenewTime.DeepCopy()
	}
	if c.PingTime != nil {
		out.PingTime = c.PingTime.DeepCopy()
	}
	out.Roles = slices.Clone(c.Roles)
}

// DeepCopy returns a copy of d that shares nothing with it.
func (d *LeaseDescription) DeepCopy() *LeaseDescription {
	if d == nil {
		return nil
	}
	out := &LeaseDescription{TypeMeta: d.TypeMeta, ElectionController: d.ElectionController.DeepCopy()}
	d.Status.DeepCopyInto(&out.Status)
	if d.Candidates != nil {
		out.Candidates = make([]CandidateStatus, len(d.Candidates))
		for i := range d.Candidates {
			d.Candidates[i].DeepCopyInto(&out.Candidates[i])
		}
	}
	if d.Events != nil {
		out.Events = make([]EventStatus, len(d.Events))
		for i := range d.Events {
			out.Events[i] = d.Events[i]
			d.Events[i].Time.DeepCopyInto(&out.Events[i].Time)
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (d *LeaseDescription) DeepCopyObject() runtime.Object {
	if c := d.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopy returns a copy of c that shares nothing with it.
func (c *LeaseChange) DeepCopy() *LeaseChange {
	if c == nil {
		return nil
	}
	out := &LeaseChange{TypeMeta: c.TypeMeta, Changes: slices.Clone(c.Changes)}
	c.Time.DeepCopyInto(&out.Time)
	c.Lease.DeepCopyInto(&out.Lease)
	return out
}

// DeepCopyObject implements runtime.Object.
func (c *LeaseChange) DeepCopyObject() runtime.Object {
	if cp := c.DeepCopy(); cp != nil {
		return cp
	}
	return nil
}
