// Package kubectlcle is what the kubectl-cle plugin shows: for each Lease under
// coordinated leader election, who holds it, who should, and why, computed from
// the Lease and its LeaseCandidates as they are stored in either API mode.
//
// The ranking and the strategy of a Lease come from pkg/strategy, the same
// functions the election controller uses, so the plugin never disagrees with
// the controller about who is best. What the plugin cannot see is the
// controller's own observations (when it last saw each candidate write, when
// it sent each ping): it judges the expiry of Leases and candidates, and
// pings left unanswered, from their renewTime and pingTime on the clock of
// the machine it runs on, and says so.
//
// It is not a supported API: its exported names serve cle's own programs
// (cle-controller, kubectl-cle, the tests) and may change in any release.
// Components import pkg/candidate, pkg/lock or contrib/controller-runtime.
package kubectlcle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/pkg/strategy"
)

// State is where the election of one Lease stands. The states are exclusive;
// Summarize tries them in the order they are listed here and returns the
// first that applies.
type State string

const (
	// StateConflict: the candidates at the highest binary version ask for
	// different strategies. The controller elects nobody and writes nothing
	// until they agree, whoever holds the Lease.
	StateConflict State = "conflict"
	// StateUnmanaged: cle-controller does not steer this Lease. Either no
	// unexpired LeaseCandidate names it (a plain Lease, such as one of
	// client-go's ordinary leader election), or its candidates ask for a
	// strategy that cle does not handle (another controller owns it), or it
	// is held, unexpired, by an identity that is not one of its candidates
	// (a component outside coordinated election, which cannot hand over: it
	// keeps the Lease until it releases it or lets it expire).
	StateUnmanaged State = "unmanaged"
	// StateVacant: the Lease does not exist yet or names no holder. The
	// controller names the best candidate holder as soon as it knows that
	// candidate is alive.
	StateVacant State = "vacant"
	// StateExpired: the Lease names a holder that has not renewed it within
	// leaseDurationSeconds (judged from renewTime on this machine's clock).
	// The controller names the best live candidate holder.
	StateExpired State = "expired"
	// StatePreempting: the holder is a candidate and leadership is about to
	// move: preferredHolder names another candidate (the holder is asked to
	// hand over), or a candidate better than the holder on merit exists, for
	// which the controller sets preferredHolder once it knows that candidate
	// is alive.
	StatePreempting State = "preempting"
	// StateOptimal: the Lease is held, unexpired, by a candidate that no
	// other candidate outranks on merit, and no handover is asked for.
	// Candidates that would win only the tie-break (equal versions, older or
	// lower name) do not take over.
	StateOptimal State = "optimal"
	// StateGroup: the Lease is a shard group's (its candidates ask for
	// cle.dev/Shards or cle.dev/ShardsOldestEmulationVersion): cle-controller
	// assigns the group's shards over its members instead of naming a holder.
	// Why tells how many shards are owned, moving and unowned.
	StateGroup State = "group"
)

// States lists every State in the order Summarize tries them.
var States = []State{StateGroup, StateConflict, StateUnmanaged, StateVacant, StateExpired, StatePreempting, StateOptimal}

// Judge computes Summaries. Its zero value is not usable: Registry is
// required.
type Judge struct {
	// Registry holds the strategies the controller handles; a Lease whose
	// candidates ask for another one is unmanaged.
	Registry *strategy.Registry
	// CandidateTTL: a candidate whose renewTime is older than this is
	// expired, as the controller's --candidate-ttl: left out of the election.
	CandidateTTL time.Duration
	// PingTimeout: a candidate pinged this long ago that has not renewed
	// since did not answer, and the controller passes it over until it
	// renews, as with its --ping-timeout. Zero judges nobody unresponsive.
	PingTimeout time.Duration
	// DefaultLeaseDuration is the lease duration of a Lease that does not
	// set leaseDurationSeconds, as the controller's --lease-duration.
	DefaultLeaseDuration time.Duration
}

// Input is one Lease and the LeaseCandidates that name it.
type Input struct {
	Key types.NamespacedName
	// Lease is nil when the Lease does not exist.
	Lease *coordinationv1.Lease
	// Candidates are the LeaseCandidates whose spec.leaseName is the Lease,
	// in any order.
	Candidates []*coordinationv1beta1.LeaseCandidate
}

// Summary is where the election of one Lease stands, and why.
type Summary struct {
	Key   types.NamespacedName
	Lease *coordinationv1.Lease
	State State
	// Why says in one sentence why the holder is who it is, or what happens
	// next.
	Why string
	// Strategy is the strategy the candidates agree on; "" on conflict or
	// when no candidate has a valid binary version.
	Strategy coordinationv1.CoordinatedLeaseStrategy
	// Holder, PreferredHolder and Term come from the Lease ("" and 0 when it
	// does not exist).
	Holder          string
	PreferredHolder string
	Term            int32
	// Best is the candidate the controller elects or keeps: the holder when
	// it is a candidate that nobody outranks on merit, the first of Ranked
	// otherwise; "" when no candidate can lead.
	Best string
	// Ranked are the valid, unexpired candidates, best first, in the
	// strategy's order.
	Ranked []*coordinationv1beta1.LeaseCandidate
	// Invalid are the unexpired candidates the strategy cannot rank, with
	// the reason.
	Invalid []strategy.InvalidCandidate
	// Expired are the candidates not renewed within the candidate TTL,
	// sorted by name.
	Expired []*coordinationv1beta1.LeaseCandidate
	// Unresponsive are the unexpired candidates that have not answered a
	// ping within the ping timeout, sorted by name: not ranked, as the
	// controller passes them over until they renew.
	Unresponsive []*coordinationv1beta1.LeaseCandidate
	// Conflicting lists, on conflict, the strategy each candidate at the
	// highest binary version asks for.
	Conflicting []strategy.CandidateStrategy
	// LeaseExpiresAt is when the holder's Lease expires (zero without a
	// holder or a renewTime).
	LeaseExpiresAt time.Time
}

// Candidates is the number of unexpired candidates, valid or not, answering
// pings or not.
func (s *Summary) Candidates() int { return len(s.Ranked) + len(s.Invalid) + len(s.Unresponsive) }

// Summarize judges the election of one Lease at now.
func (j Judge) Summarize(in Input, now time.Time) Summary {
	s := Summary{Key: in.Key, Lease: in.Lease}
	live := j.splitExpired(&s, in.Candidates, now)
	if l := in.Lease; l != nil {
		s.Holder = ptr.Deref(l.Spec.HolderIdentity, "")
		s.PreferredHolder = ptr.Deref(l.Spec.PreferredHolder, "")
		s.Term = ptr.Deref(l.Spec.LeaseTransitions, 0)
		s.Strategy = ptr.Deref(l.Spec.Strategy, "")
	}
	if len(live) == 0 {
		s.State = StateUnmanaged
		s.Why = "No unexpired LeaseCandidate names this Lease, so it is not under coordinated election."
		if len(s.Expired) > 0 {
			s.Why = fmt.Sprintf("Its %d candidates have all expired (not renewed within %s), so nobody is elected.", len(s.Expired), j.CandidateTTL)
		}
		return s
	}
	if group, ok := summarizeGroup(&s, live); ok {
		return group
	}

	res := strategy.ResolveStrategy(live)
	if res.Conflict {
		s.Strategy = ""
		s.Conflicting = res.Conflicting
		s.Invalid = invalidAll(live, "the candidates disagree on the strategy")
		s.State = StateConflict
		s.Why = fmt.Sprintf("The candidates at binary version %s ask for different strategies (%s), so nobody is elected until they agree.",
			res.BinaryVersion, strategy.DescribeConflict(res.Conflicting))
		return s
	}
	var strat strategy.Strategy
	if res.BinaryVersion != "" {
		s.Strategy = res.Strategy
		var ok bool
		if strat, ok = j.Registry.Get(res.Strategy); !ok {
			s.Invalid = invalidAll(live, "strategy not handled by cle")
			s.State = StateUnmanaged
			s.Why = fmt.Sprintf("Its candidates ask for strategy %q, which cle does not handle (it handles %s): another controller owns this election.",
				res.Strategy, joinStrategies(j.Registry.Names()))
			return s
		}
		s.Ranked, s.Invalid = strat.Rank(j.splitUnresponsive(&s, live, now))
	} else {
		s.Invalid = invalidAll(live, "binaryVersion is not a strict semantic version")
	}

	var best *coordinationv1beta1.LeaseCandidate
	if len(s.Ranked) > 0 {
		best = s.Ranked[0]
	}
	if s.Holder == "" {
		s.State = StateVacant
		s.Best = nameOf(best)
		if in.Lease == nil {
			s.Why = "The Lease does not exist yet: " + j.whoNext(&s, best)
		} else {
			s.Why = "The Lease has no holder: " + j.whoNext(&s, best)
		}
		return s
	}
	if renewed := access.LastRenewal(in.Lease); !renewed.IsZero() {
		s.LeaseExpiresAt = renewed.Add(j.leaseDuration(in.Lease))
	}
	if s.LeaseExpiresAt.IsZero() || !now.Before(s.LeaseExpiresAt) {
		s.State = StateExpired
		s.Best = nameOf(best)
		since := "never renewed"
		if !s.LeaseExpiresAt.IsZero() {
			since = "expired " + duration.HumanDuration(now.Sub(s.LeaseExpiresAt)) + " ago"
		}
		s.Why = fmt.Sprintf("Holder %s stopped renewing the Lease (%s): %s", s.Holder, since, j.whoNext(&s, best))
		return s
	}
	holder := findCandidate(live, s.Holder)
	if holder == nil {
		s.State = StateUnmanaged
		s.Best = nameOf(best)
		s.Why = fmt.Sprintf("Holder %s is not one of the candidates, so it cannot hand over: it keeps the Lease until it releases it or lets it expire, then %s.",
			s.Holder, orNobody(best, "is elected"))
		return s
	}
	preempted := best != nil && best.Name != s.Holder && strategy.Preempts(strat, best, holder)
	if preempted {
		s.Best = best.Name
	} else if strat != nil && strat.Validate(holder) == nil {
		s.Best = s.Holder
	} else {
		s.Best = nameOf(best)
	}
	switch {
	case s.PreferredHolder != "" && s.PreferredHolder != s.Holder:
		s.State = StatePreempting
		s.Why = fmt.Sprintf("preferredHolder asks holder %s to hand over to %s (%s): it stops leading, then writes %s as holder.",
			s.Holder, s.PreferredHolder, describeCandidate(findCandidate(live, s.PreferredHolder)), s.PreferredHolder)
	case preempted:
		s.State = StatePreempting
		s.Why = fmt.Sprintf("%s (%s) is better than holder %s (%s) on merit: the controller sets preferredHolder to it once it knows it is alive, and the holder hands over.",
			best.Name, describeCandidate(best), s.Holder, describeCandidate(holder))
	default:
		s.State = StateOptimal
		s.Why = j.whyOptimal(&s, holder, best)
		if len(s.Unresponsive) > 0 {
			s.Why += " Passed over until they renew, for not answering the controller's ping: " + joinNames(s.Unresponsive) + "."
		}
	}
	return s
}

func (j Judge) whyOptimal(s *Summary, holder, best *coordinationv1beta1.LeaseCandidate) string {
	switch {
	case best == nil:
		return fmt.Sprintf("%s holds the Lease; no candidate is valid under %s, so none can take over.", s.Holder, s.Strategy)
	case s.Best != s.Holder:
		return fmt.Sprintf("%s holds the Lease but is not valid under %s; nobody better can take over.", s.Holder, s.Strategy)
	case best.Name == s.Holder && len(s.Ranked) == 1:
		return fmt.Sprintf("%s (%s) holds the Lease and is the only valid candidate.", s.Holder, describeCandidate(holder))
	case best.Name == s.Holder:
		return fmt.Sprintf("%s (%s) holds the Lease and is the best of its %d candidates under %s.", s.Holder, describeCandidate(holder), s.Candidates(), s.Strategy)
	default:
		return fmt.Sprintf("%s (%s) holds the Lease; %s is no better on merit and would win only the tie-break, so the holder keeps it.",
			s.Holder, describeCandidate(holder), best.Name)
	}
}

// whoNext says whom the controller elects into a vacant or expired Lease.
func (j Judge) whoNext(s *Summary, best *coordinationv1beta1.LeaseCandidate) string {
	if best == nil && len(s.Unresponsive) > 0 && len(s.Invalid) == 0 {
		return fmt.Sprintf("none of its %d candidates answered the controller's ping (%s), so nobody is elected until one renews.",
			s.Candidates(), joinNames(s.Unresponsive))
	}
	if best == nil {
		return fmt.Sprintf("none of its %d candidates can lead (%s), so nobody is elected.", s.Candidates(), describeInvalid(s.Invalid))
	}
	return fmt.Sprintf("the controller names %s (%s), the best of %d candidates under %s, holder once it knows it is alive (or the next best that is).",
		best.Name, describeCandidate(best), s.Candidates(), s.Strategy)
}

// splitUnresponsive moves the candidates that have not answered a ping
// within the ping timeout to s.Unresponsive and returns the others.
func (j Judge) splitUnresponsive(s *Summary, cands []*coordinationv1beta1.LeaseCandidate, now time.Time) []*coordinationv1beta1.LeaseCandidate {
	return moveOut(cands, &s.Unresponsive, func(lc *coordinationv1beta1.LeaseCandidate) bool {
		return j.PingTimeout > 0 && PingState(lc) == "pending" && !now.Before(lc.Spec.PingTime.Add(j.PingTimeout))
	})
}

// splitExpired moves the candidates not renewed within the TTL to s.Expired
// and returns the others.
func (j Judge) splitExpired(s *Summary, cands []*coordinationv1beta1.LeaseCandidate, now time.Time) []*coordinationv1beta1.LeaseCandidate {
	return moveOut(cands, &s.Expired, func(lc *coordinationv1beta1.LeaseCandidate) bool {
		return j.CandidateTTL > 0 && !now.Before(LastRenewal(lc).Add(j.CandidateTTL))
	})
}

// moveOut appends the candidates out selects to *to, sorted by name, and
// returns the others; nil entries are dropped.
func moveOut(cands []*coordinationv1beta1.LeaseCandidate, to *[]*coordinationv1beta1.LeaseCandidate, out func(*coordinationv1beta1.LeaseCandidate) bool) []*coordinationv1beta1.LeaseCandidate {
	var kept []*coordinationv1beta1.LeaseCandidate
	for _, lc := range cands {
		switch {
		case lc == nil:
		case out(lc):
			*to = append(*to, lc)
		default:
			kept = append(kept, lc)
		}
	}
	slices.SortFunc(*to, byName)
	return kept
}

func joinNames(cands []*coordinationv1beta1.LeaseCandidate) string {
	names := make([]string, 0, len(cands))
	for _, lc := range cands {
		names = append(names, lc.Name)
	}
	return strings.Join(names, ", ")
}

func (j Judge) leaseDuration(l *coordinationv1.Lease) time.Duration {
	if d := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); d > 0 {
		return time.Duration(d) * time.Second
	}
	return j.DefaultLeaseDuration
}

// LastRenewal is when a candidate last renewed: its renewTime, or its
// creation when it never did.
func LastRenewal(lc *coordinationv1beta1.LeaseCandidate) time.Time {
	if lc.Spec.RenewTime != nil {
		return lc.Spec.RenewTime.Time
	}
	return lc.CreationTimestamp.Time
}

// PingState says whether a candidate was pinged and answered: "" when it was
// never pinged, "answered" when it renewed at or after the ping, "pending"
// when the ping is newer than its last renewal.
func PingState(lc *coordinationv1beta1.LeaseCandidate) string {
	switch {
	case lc.Spec.PingTime == nil:
		return ""
	case lc.Spec.RenewTime != nil && !lc.Spec.RenewTime.Before(lc.Spec.PingTime):
		return "answered"
	default:
		return "pending"
	}
}

func invalidAll(cands []*coordinationv1beta1.LeaseCandidate, reason string) []strategy.InvalidCandidate {
	out := make([]strategy.InvalidCandidate, 0, len(cands))
	for _, lc := range slices.SortedFunc(slices.Values(cands), byName) {
		out = append(out, strategy.InvalidCandidate{Candidate: lc, Reason: fmt.Errorf("%s", reason)})
	}
	return out
}

func findCandidate(cands []*coordinationv1beta1.LeaseCandidate, name string) *coordinationv1beta1.LeaseCandidate {
	for _, lc := range cands {
		if lc.Name == name {
			return lc
		}
	}
	return nil
}

func nameOf(lc *coordinationv1beta1.LeaseCandidate) string {
	if lc == nil {
		return ""
	}
	return lc.Name
}

func orNobody(lc *coordinationv1beta1.LeaseCandidate, verb string) string {
	if lc == nil {
		return "nobody can be elected until a valid candidate registers"
	}
	return lc.Name + " " + verb
}

// describeCandidate gives what a candidate is ranked by.
func describeCandidate(lc *coordinationv1beta1.LeaseCandidate) string {
	if lc == nil {
		return "not a candidate"
	}
	d := fmt.Sprintf("emulation %s, binary %s", lc.Spec.EmulationVersion, lc.Spec.BinaryVersion)
	if p, ok := lc.Annotations[strategy.PriorityAnnotation]; ok && lc.Spec.Strategy == strategy.PriorityName {
		d = "priority " + p + ", " + d
	}
	return d
}

func describeInvalid(inv []strategy.InvalidCandidate) string {
	parts := make([]string, 0, len(inv))
	for _, i := range inv {
		parts = append(parts, fmt.Sprintf("%s: %v", i.Candidate.Name, i.Reason))
	}
	return strings.Join(parts, "; ")
}

func joinStrategies(names []coordinationv1.CoordinatedLeaseStrategy) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = string(n)
	}
	return strings.Join(parts, ", ")
}

func byName(a, b *coordinationv1beta1.LeaseCandidate) int {
	return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Namespace, b.Namespace))
}

// summarizeGroup summarizes a shard group's Lease, if the live candidates
// ask for a shard strategy.
func summarizeGroup(s *Summary, live []*coordinationv1beta1.LeaseCandidate) (Summary, bool) {
	members := 0
	for _, lc := range live {
		if shard.IsStrategy(string(lc.Spec.Strategy)) {
			members++
			s.Strategy = lc.Spec.Strategy
		}
	}
	if members == 0 {
		return *s, false
	}
	s.State = StateGroup
	s.Holder, s.PreferredHolder, s.Term = "", "", 0
	if s.Lease == nil {
		s.Why = fmt.Sprintf("A shard group of %d candidates; the controller has not assigned its shards yet.", members)
		return *s, true
	}
	g, err := shard.ParseGroup(s.Lease.Annotations)
	if err != nil {
		s.Why = fmt.Sprintf("A shard group of %d candidates whose Lease cannot be read, so nothing is assigned: %v", members, err)
		return *s, true
	}
	if g.Count == 0 {
		s.Why = fmt.Sprintf("A shard group of %d candidates; the controller has not assigned its shards yet.", members)
		return *s, true
	}
	owners := g.DescribeOwners()
	if owners == "" {
		owners = "nobody"
	}
	unowned := g.Unowned()
	s.Why = fmt.Sprintf("A shard group of %d shards (generation %d) over %d candidates: %d owned, %d moving, %d unowned; by owner: %s.",
		g.Count, g.Generation, members, g.Count-unowned-len(g.Moving), len(g.Moving), unowned, owners)
	return *s, true
}
