package kubectlcle

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/shard"
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
	// Group is the shard group's assignment and members, for a group's
	// Lease.
	Group  *GroupStatus  `json:"group,omitempty"`
	Events []EventStatus `json:"events"`
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
		d.Candidates = append(d.Candidates, candidateStatus(lc, rank, roles(lc.Name), excluded))
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

// candidateStatus is the row of lc.
func candidateStatus(lc *coordinationv1beta1.LeaseCandidate, rank int, roles []string, excluded string) CandidateStatus {
	return CandidateStatus{
		Rank:             rank,
		Name:             lc.Name,
		BinaryVersion:    lc.Spec.BinaryVersion,
		EmulationVersion: lc.Spec.EmulationVersion,
		Strategy:         string(lc.Spec.Strategy),
		Priority:         lc.Annotations[strategy.PriorityAnnotation],
		RenewTime:        lc.Spec.RenewTime,
		PingTime:         lc.Spec.PingTime,
		Ping:             PingState(lc),
		Roles:            roles,
		Excluded:         excluded,
		Pod:              lc.Annotations[access.PodAnnotation],
		Container:        lc.Annotations[access.ContainerAnnotation],
		Instance:         lc.Annotations[access.InstanceAnnotation],
	}
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
	out := &LeaseDescription{TypeMeta: d.TypeMeta, ElectionController: d.ElectionController.DeepCopy(), Group: d.Group.DeepCopy()}
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

// GroupStatus is what `kubectl cle describe` shows of a shard group: its
// assignment, as the group Lease says, and each member as its member Lease
// says.
type GroupStatus struct {
	// Count is the shard count in effect, Generation the assignment's.
	Count      int   `json:"count"`
	Generation int64 `json:"generation"`
	Owned      int   `json:"owned"`
	Moving     int   `json:"moving"`
	Unowned    int   `json:"unowned"`
	// Spread is the largest difference in shards between two owners.
	Spread  int           `json:"spread"`
	Members []GroupMember `json:"members"`
	// Moves are the shards whose owners are asked to let go.
	Moves []ShardMove `json:"moves"`
	// UnownedShards are the shards nobody owns, as runs ("3-5,9").
	UnownedShards string `json:"unownedShards,omitempty"`
	// Tokens are each shard's last token, as runs of equal tokens.
	Tokens []ShardTokens `json:"tokens"`
}

// GroupMember is one replica of a group.
type GroupMember struct {
	Name string `json:"name"`
	// Epoch is the epoch the group Lease grants its shards in; Shards those
	// shards, as runs, and Owned how many.
	Epoch  int64  `json:"epoch,omitempty"`
	Shards string `json:"shards,omitempty"`
	Owned  int    `json:"owned"`
	// What its member Lease says: the holder (empty once released), its
	// epoch, when it was renewed, the shards it acts on and those it has
	// let go of.
	LeaseHolder string            `json:"leaseHolder,omitempty"`
	LeaseEpoch  int64             `json:"leaseEpoch,omitempty"`
	RenewTime   *metav1.MicroTime `json:"renewTime,omitempty"`
	Acting      string            `json:"acting,omitempty"`
	Released    string            `json:"released,omitempty"`
	// Declared is the shard count its LeaseCandidate declares.
	Declared string `json:"declared,omitempty"`
}

// DeepCopy returns a copy of g that shares nothing with it.
func (g *GroupStatus) DeepCopy() *GroupStatus {
	if g == nil {
		return nil
	}
	out := *g
	out.Members = slices.Clone(g.Members)
	for i := range out.Members {
		out.Members[i].RenewTime = g.Members[i].RenewTime.DeepCopy()
	}
	out.Moves, out.Tokens = slices.Clone(g.Moves), slices.Clone(g.Tokens)
	return &out
}

// ShardMove is a shard whose owner is asked to let it go.
type ShardMove struct {
	Shard int    `json:"shard"`
	From  string `json:"from"`
	To    string `json:"to,omitempty"`
}

// ShardTokens are shards whose last token is Token.
type ShardTokens struct {
	Shards string `json:"shards"`
	Token  int64  `json:"token"`
}

// DescribeGroup adds to d what the group Lease of s and the member Leases
// among leases say, when s is a shard group's.
func DescribeGroup(d *LeaseDescription, s *Summary, cands []*coordinationv1beta1.LeaseCandidate, leases []*coordinationv1.Lease) {
	if s.State != StateGroup || s.Lease == nil {
		return
	}
	g, err := shard.ParseGroup(s.Lease.Annotations)
	if err != nil || g.Count == 0 {
		return
	}
	gs := &GroupStatus{Count: g.Count, Generation: g.Generation, Moving: len(g.Moving), Unowned: g.Unowned(),
		Members: []GroupMember{}, Moves: []ShardMove{}, Tokens: []ShardTokens{}}
	gs.Owned = g.Count - gs.Unowned - gs.Moving
	members := map[string]*GroupMember{}
	member := func(name string) *GroupMember {
		if m := members[name]; m != nil {
			return m
		}
		m := &GroupMember{Name: name}
		members[name] = m
		return m
	}
	owned := map[string][]int{}
	var unowned []int
	for i, o := range g.Owners {
		if o.Member == "" {
			unowned = append(unowned, i)
			continue
		}
		m := member(o.Member)
		m.Epoch = o.Epoch
		owned[o.Member] = append(owned[o.Member], i)
	}
	for name, shards := range owned {
		members[name].Shards, members[name].Owned = runsOf(shards), len(shards)
	}
	gs.UnownedShards = runsOf(unowned)
	// A group's candidates are not ranked: each is listed as a member.
	for _, lc := range slices.SortedFunc(slices.Values(cands), byName) {
		if lc.Spec.LeaseName == s.Key.Name && shard.IsStrategy(string(lc.Spec.Strategy)) && !slices.Contains(s.Expired, lc) {
			member(lc.Name).Declared = lc.Annotations[shard.DeclaredAnnotation]
			d.Candidates = append(d.Candidates, candidateStatus(lc, 0, []string{"member"}, ""))
		}
	}
	for _, l := range leases {
		replica, ok := strings.CutPrefix(l.Name, s.Key.Name+".")
		if l.Namespace != s.Key.Namespace || l.Annotations[shard.GroupAnnotation] != s.Key.Name || !ok {
			continue
		}
		m := member(replica)
		m.LeaseHolder, m.LeaseEpoch, m.RenewTime = ptr.Deref(l.Spec.HolderIdentity, ""), int64(ptr.Deref(l.Spec.LeaseTransitions, 0)), l.Spec.RenewTime
		if a, err := shard.ParseActing(l.Annotations[shard.ActingAnnotation]); err == nil {
			m.Acting = runsOf(slices.Collect(maps.Keys(a.Shards)))
		}
		m.Released = l.Annotations[shard.ReleasedAnnotation]
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		gs.Members = append(gs.Members, *members[name])
	}
	counts := g.OwnerCounts()
	if len(counts) > 0 {
		lo, hi := g.Count, 0
		for _, n := range counts {
			lo, hi = min(lo, n), max(hi, n)
		}
		gs.Spread = hi - lo
	}
	for _, i := range slices.Sorted(maps.Keys(g.Moving)) {
		gs.Moves = append(gs.Moves, ShardMove{Shard: i, From: g.Owners[i].Member, To: g.Moving[i]})
	}
	for i := 0; i < len(g.Tokens); {
		j := i
		for j+1 < len(g.Tokens) && g.Tokens[j+1] == g.Tokens[i] {
			j++
		}
		gs.Tokens = append(gs.Tokens, ShardTokens{Shards: span(i, j), Token: g.Tokens[i]})
		i = j + 1
	}
	d.Group = gs
}

// runsOf writes shards as sorted runs: "0-10,12".
func runsOf(shards []int) string {
	shards = slices.Sorted(slices.Values(shards))
	var parts []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		parts = append(parts, span(shards[i], shards[j]))
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// span writes the shards from to to: "3", "3-5".
func span(from, to int) string {
	if from == to {
		return strconv.Itoa(from)
	}
	return fmt.Sprintf("%d-%d", from, to)
}
