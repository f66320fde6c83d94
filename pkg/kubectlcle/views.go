package kubectlcle

import (
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/strategy"
)

// LeaseStatus is one row of `kubectl cle status`, and what -o json|yaml
// prints for it.
type LeaseStatus struct {
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
	// Excluded says why the candidate takes no part: expired, or invalid
	// with the reason.
	Excluded string `json:"excluded,omitempty"`
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
	Status     LeaseStatus       `json:"status"`
	Candidates []CandidateStatus `json:"candidates"`
	Events     []EventStatus     `json:"events"`
}

// Status turns a Summary into a status row.
func Status(s *Summary, mode access.Mode) LeaseStatus {
	st := LeaseStatus{
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

// Describe turns a Summary and the Lease's Events into a description.
func Describe(s *Summary, mode access.Mode, events []corev1.Event) LeaseDescription {
	d := LeaseDescription{Status: Status(s, mode), Candidates: []CandidateStatus{}, Events: []EventStatus{}}
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
		}
		d.Candidates = append(d.Candidates, c)
	}
	for i, lc := range s.Ranked {
		add(i+1, lc, "")
	}
	for _, inv := range s.Invalid {
		add(0, inv.Candidate, "invalid: "+inv.Reason.Error())
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
