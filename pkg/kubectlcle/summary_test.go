package kubectlcle

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/pkg/strategy"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type candSpec struct {
	name, binary, emulation string
	strategy                coordinationv1.CoordinatedLeaseStrategy
	renewedAgo              time.Duration
	created                 time.Duration // before now
	priority                string
	pingedAgo               time.Duration // pinged when not zero
}

func cand(c candSpec) *coordinationv1beta1.LeaseCandidate {
	if c.strategy == "" {
		c.strategy = coordinationv1.OldestEmulationVersion
	}
	if c.created == 0 {
		c.created = time.Hour
	}
	lc := &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: c.name, CreationTimestamp: metav1.NewTime(now.Add(-c.created))},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: "l", BinaryVersion: c.binary, EmulationVersion: c.emulation, Strategy: c.strategy,
			RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-c.renewedAgo))),
		},
	}
	if c.priority != "" {
		lc.Annotations = map[string]string{strategy.PriorityAnnotation: c.priority}
	}
	if c.pingedAgo != 0 {
		lc.Spec.PingTime = ptr.To(metav1.NewMicroTime(now.Add(-c.pingedAgo)))
	}
	return lc
}

type leaseSpec struct {
	holder, preferred string
	renewedAgo        time.Duration
	noRenew           bool
	term              int32
	strategy          string
}

func lease(l leaseSpec) *coordinationv1.Lease {
	out := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr.To[int32](15),
			LeaseTransitions:     ptr.To(l.term),
		},
	}
	if l.holder != "" {
		out.Spec.HolderIdentity = ptr.To(l.holder)
	}
	if l.preferred != "" {
		out.Spec.PreferredHolder = ptr.To(l.preferred)
	}
	if !l.noRenew {
		out.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-l.renewedAgo)))
	}
	if l.strategy != "" {
		out.Spec.Strategy = ptr.To(coordinationv1.CoordinatedLeaseStrategy(l.strategy))
	}
	return out
}

var (
	old    = candSpec{name: "old", binary: "1.36.0", emulation: "1.35.0"}
	newer  = candSpec{name: "newer", binary: "1.36.0", emulation: "1.36.0"}
	twin   = candSpec{name: "a-twin", binary: "1.36.0", emulation: "1.36.0", created: 2 * time.Hour} // wins newer's tie-break only
	broken = candSpec{name: "broken", binary: "1.36.0", emulation: "not-a-version"}
)

func TestSummarizeState(t *testing.T) {
	judge := Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: 30 * time.Minute, PingTimeout: 5 * time.Second, DefaultLeaseDuration: 15 * time.Second}
	// old, pinged after its last renewal: answering for now, then past the
	// ping timeout.
	pinged := candSpec{name: "old", binary: "1.36.0", emulation: "1.35.0", renewedAgo: 20 * time.Second, pingedAgo: 4 * time.Second}
	unanswered := pinged
	unanswered.pingedAgo = 6 * time.Second
	for _, tc := range []struct {
		name      string
		lease     *coordinationv1.Lease
		cands     []candSpec
		state     State
		best      string
		candCount int
		why       string // a fragment of Why
	}{
		{name: "no candidates, plain Lease", lease: lease(leaseSpec{holder: "x"}), state: StateUnmanaged, why: "No unexpired LeaseCandidate"},
		{name: "all candidates expired", lease: lease(leaseSpec{holder: "old"}),
			cands: []candSpec{{name: "old", binary: "1.36.0", emulation: "1.35.0", renewedAgo: time.Hour}}, state: StateUnmanaged, why: "have all expired"},
		{name: "conflict wins over a healthy holder", lease: lease(leaseSpec{holder: "old"}),
			cands: []candSpec{old, {name: "p", binary: "1.36.0", emulation: "1.36.0", strategy: strategy.PriorityName}},
			state: StateConflict, candCount: 2, why: "ask for different strategies"},
		{name: "conflict only counts the highest binary version", lease: lease(leaseSpec{holder: "old"}),
			cands: []candSpec{{name: "old", binary: "1.36.0", emulation: "1.34.0"}, {name: "p", binary: "1.35.0", emulation: "1.35.0", strategy: strategy.PriorityName}},
			state: StateOptimal, best: "old", candCount: 2},
		{name: "strategy of another controller", lease: lease(leaseSpec{holder: "o"}),
			cands: []candSpec{{name: "o", binary: "1.36.0", emulation: "1.36.0", strategy: "example.com/Other"}},
			state: StateUnmanaged, candCount: 1, why: `"example.com/Other", which cle does not handle`},
		{name: "holder is not a candidate", lease: lease(leaseSpec{holder: "outsider"}), cands: []candSpec{old},
			state: StateUnmanaged, best: "old", candCount: 1, why: "Holder outsider is not one of the candidates"},
		{name: "no Lease yet", cands: []candSpec{newer, old}, state: StateVacant, best: "old", candCount: 2, why: "does not exist yet"},
		{name: "released Lease", lease: lease(leaseSpec{term: 3}), cands: []candSpec{newer, old}, state: StateVacant, best: "old", candCount: 2, why: "has no holder"},
		{name: "vacant, nobody valid", lease: lease(leaseSpec{}), cands: []candSpec{broken}, state: StateVacant, candCount: 1, why: "none of its 1 candidates can lead"},
		{name: "expired holder", lease: lease(leaseSpec{holder: "newer", renewedAgo: 20 * time.Second}), cands: []candSpec{newer, old},
			state: StateExpired, best: "old", candCount: 2, why: "Holder newer stopped renewing"},
		{name: "never renewed holder", lease: lease(leaseSpec{holder: "newer", noRenew: true}), cands: []candSpec{newer},
			state: StateExpired, best: "newer", candCount: 1, why: "never renewed"},
		{name: "expired outsider is expired, not unmanaged", lease: lease(leaseSpec{holder: "outsider", renewedAgo: time.Minute}), cands: []candSpec{old},
			state: StateExpired, best: "old", candCount: 1},
		{name: "preferredHolder set", lease: lease(leaseSpec{holder: "newer", preferred: "old"}), cands: []candSpec{newer, old},
			state: StatePreempting, best: "old", candCount: 2, why: "preferredHolder asks holder newer to hand over to old"},
		{name: "better candidate, preferredHolder not set yet", lease: lease(leaseSpec{holder: "newer"}), cands: []candSpec{newer, old},
			state: StatePreempting, best: "old", candCount: 2, why: "is better than holder newer"},
		{name: "invalid holder is preempted by a valid candidate", lease: lease(leaseSpec{holder: "broken"}), cands: []candSpec{broken, newer},
			state: StatePreempting, best: "newer", candCount: 2},
		{name: "best holds", lease: lease(leaseSpec{holder: "old"}), cands: []candSpec{newer, old},
			state: StateOptimal, best: "old", candCount: 2, why: "is the best of its 2 candidates"},
		{name: "only candidate holds", lease: lease(leaseSpec{holder: "old"}), cands: []candSpec{old},
			state: StateOptimal, best: "old", candCount: 1, why: "the only valid candidate"},
		{name: "tie-break winner does not preempt", lease: lease(leaseSpec{holder: "newer"}), cands: []candSpec{newer, twin},
			state: StateOptimal, best: "newer", candCount: 2, why: "a-twin is no better on merit"},
		{name: "expired candidate is left out of the ranking", lease: lease(leaseSpec{holder: "newer"}),
			cands: []candSpec{newer, {name: "old", binary: "1.36.0", emulation: "1.35.0", renewedAgo: 31 * time.Minute}},
			state: StateOptimal, best: "newer", candCount: 1},
		{name: "better candidate pinged, the ping not timed out yet", lease: lease(leaseSpec{holder: "newer"}), cands: []candSpec{newer, pinged},
			state: StatePreempting, best: "old", candCount: 2, why: "is better than holder newer"},
		{name: "better candidate that did not answer its ping is passed over", lease: lease(leaseSpec{holder: "newer"}), cands: []candSpec{newer, unanswered},
			state: StateOptimal, best: "newer", candCount: 2, why: "is the only valid candidate. Passed over until they renew, for not answering the controller's ping: old."},
		{name: "a ping answered counts for nothing", lease: lease(leaseSpec{holder: "newer"}),
			cands: []candSpec{newer, {name: "old", binary: "1.36.0", emulation: "1.35.0", renewedAgo: 5 * time.Second, pingedAgo: 6 * time.Second}},
			state: StatePreempting, best: "old", candCount: 2},
		{name: "vacant, every candidate unresponsive", lease: lease(leaseSpec{}), cands: []candSpec{unanswered},
			state: StateVacant, candCount: 1, why: "none of its 1 candidates answered the controller's ping (old)"},
		{name: "priority outranks versions", lease: lease(leaseSpec{holder: "low"}),
			cands: []candSpec{
				{name: "low", binary: "1.36.0", emulation: "1.35.0", strategy: strategy.PriorityName},
				{name: "high", binary: "1.36.0", emulation: "1.36.0", strategy: strategy.PriorityName, priority: "10"},
			},
			state: StatePreempting, best: "high", candCount: 2, why: "priority 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Key: types.NamespacedName{Namespace: "ns", Name: "l"}, Lease: tc.lease}
			for _, c := range tc.cands {
				in.Candidates = append(in.Candidates, cand(c))
			}
			s := judge.Summarize(in, now)
			if s.State != tc.state || s.Best != tc.best || s.Candidates() != tc.candCount {
				t.Errorf("state %s, best %q, %d candidates; want %s, %q, %d (why: %s)", s.State, s.Best, s.Candidates(), tc.state, tc.best, tc.candCount, s.Why)
			}
			if !strings.Contains(s.Why, tc.why) {
				t.Errorf("why %q does not say %q", s.Why, tc.why)
			}
			// Reversing the candidates changes nothing.
			rev := in
			rev.Candidates = nil
			for i := len(in.Candidates) - 1; i >= 0; i-- {
				rev.Candidates = append(rev.Candidates, in.Candidates[i])
			}
			if r := judge.Summarize(rev, now); r.State != s.State || r.Best != s.Best || r.Why != s.Why {
				t.Errorf("reversed candidates: %s/%q/%q, want %s/%q/%q", r.State, r.Best, r.Why, s.State, s.Best, s.Why)
			}
		})
	}
}

func TestSummarizeRanking(t *testing.T) {
	judge := Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: 30 * time.Minute, DefaultLeaseDuration: 15 * time.Second}
	in := Input{Key: types.NamespacedName{Namespace: "ns", Name: "l"}}
	for _, c := range []candSpec{newer, broken, old, twin} {
		in.Candidates = append(in.Candidates, cand(c))
	}
	s := judge.Summarize(in, now)
	var got []string
	for _, lc := range s.Ranked {
		got = append(got, lc.Name)
	}
	if want := "old a-twin newer"; strings.Join(got, " ") != want {
		t.Errorf("ranked %v, want %s", got, want)
	}
	if len(s.Invalid) != 1 || s.Invalid[0].Candidate.Name != "broken" {
		t.Errorf("invalid %v, want broken", s.Invalid)
	}
}

func TestPingState(t *testing.T) {
	at := func(d time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(now.Add(d))) }
	for _, tc := range []struct {
		renew, ping *metav1.MicroTime
		want        string
	}{
		{renew: at(0), want: ""},
		{renew: at(0), ping: at(time.Second), want: "pending"},
		{ping: at(time.Second), want: "pending"},
		{renew: at(time.Second), ping: at(time.Second), want: "answered"},
		{renew: at(2 * time.Second), ping: at(time.Second), want: "answered"},
	} {
		lc := &coordinationv1beta1.LeaseCandidate{Spec: coordinationv1beta1.LeaseCandidateSpec{RenewTime: tc.renew, PingTime: tc.ping}}
		if got := PingState(lc); got != tc.want {
			t.Errorf("renew %v ping %v: %q, want %q", tc.renew, tc.ping, got, tc.want)
		}
	}
}

func TestDescribeSaysWhyCandidatesAreLeftOut(t *testing.T) {
	judge := Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: 30 * time.Minute, PingTimeout: 5 * time.Second, DefaultLeaseDuration: 15 * time.Second}
	in := Input{Key: types.NamespacedName{Namespace: "ns", Name: "l"}, Lease: lease(leaseSpec{holder: "newer"})}
	for _, c := range []candSpec{
		newer, broken,
		{name: "old", binary: "1.36.0", emulation: "1.35.0", renewedAgo: 20 * time.Second, pingedAgo: 10 * time.Second},
		{name: "gone", binary: "1.36.0", emulation: "1.34.0", renewedAgo: time.Hour},
	} {
		in.Candidates = append(in.Candidates, cand(c))
	}
	s := judge.Summarize(in, now)
	got := map[string]string{}
	for _, c := range Describe(&s, access.ModeNative, nil).Candidates {
		got[c.Name] = fmt.Sprintf("%d %s", c.Rank, c.Excluded)
	}
	want := map[string]string{
		"newer":  "1 ",
		"broken": "0 invalid: ",
		"old":    "0 unresponsive: no renewal since its ping",
		"gone":   "0 expired",
	}
	for name, w := range want {
		if !strings.HasPrefix(got[name], w) {
			t.Errorf("%s: %q, want %q...", name, got[name], w)
		}
	}
	if s.State != StateOptimal || s.Candidates() != 3 {
		t.Errorf("state %s with %d candidates, want optimal with 3 (why: %s)", s.State, s.Candidates(), s.Why)
	}
}

func TestDescribeSaysWhereCandidatesRun(t *testing.T) {
	judge := Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: 30 * time.Minute, PingTimeout: 5 * time.Second, DefaultLeaseDuration: 15 * time.Second}
	lc := cand(newer)
	lc.Annotations = map[string]string{access.PodAnnotation: "team/app-0", access.ContainerAnnotation: "app", access.InstanceAnnotation: "0123456789abcdef0123456789abcdef"}
	in := Input{Key: types.NamespacedName{Namespace: "ns", Name: "l"}, Lease: lease(leaseSpec{holder: "newer"}), Candidates: []*coordinationv1beta1.LeaseCandidate{lc, cand(broken)}}
	s := judge.Summarize(in, now)
	got := map[string]string{}
	for _, c := range Describe(&s, access.ModeNative, nil).Candidates {
		got[c.Name] = c.Pod + " " + c.Container + " " + c.Instance
	}
	if got["newer"] != "team/app-0 app 0123456789abcdef0123456789abcdef" || got["broken"] != "  " {
		t.Errorf("candidates' Pods and instances: %q, want newer's only", got)
	}
}

func TestSummarizeGroup(t *testing.T) {
	judge := Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: 30 * time.Minute, PingTimeout: 5 * time.Second, DefaultLeaseDuration: 15 * time.Second}
	member := func(name string) candSpec {
		return candSpec{name: name, binary: "1.36.0", emulation: "1.36.0", strategy: shard.StrategyShards}
	}
	var cands []*coordinationv1beta1.LeaseCandidate
	for _, c := range []candSpec{member("a"), member("b")} {
		cands = append(cands, cand(c))
	}
	in := Input{Key: types.NamespacedName{Namespace: "ns", Name: "l"}, Candidates: cands}
	if s := judge.Summarize(in, now); s.State != StateGroup || !strings.Contains(s.Why, "not assigned its shards yet") {
		t.Errorf("a group with no Lease: %s: %s", s.State, s.Why)
	}

	g := shard.Group{Generation: 4, Count: 5, Owners: []shard.Owner{{Member: "a", Epoch: 1}, {Member: "a", Epoch: 1}, {Member: "b", Epoch: 2}, {}, {Member: "b", Epoch: 2}},
		Tokens: []int64{1, 1, 2, 0, 3}, Moving: map[int]string{4: "a"}}
	ann, err := g.Annotations()
	if err != nil {
		t.Fatal(err)
	}
	l := lease(leaseSpec{strategy: shard.StrategyShards})
	l.Annotations = ann
	in.Lease = l
	s := judge.Summarize(in, now)
	want := "A shard group of 5 shards (generation 4) over 2 candidates: 3 owned, 1 moving, 1 unowned; by owner: a 2, b 2."
	if s.State != StateGroup || s.Why != want || s.Strategy != shard.StrategyShards {
		t.Errorf("Summarize = %s, %q, %q; want group, %q", s.State, s.Why, s.Strategy, want)
	}

	l.Annotations = map[string]string{shard.CountAnnotation: "x"}
	if s := judge.Summarize(in, now); s.State != StateGroup || !strings.Contains(s.Why, "cannot be read") {
		t.Errorf("an unreadable group Lease: %s: %s", s.State, s.Why)
	}
}

// TestDescribeGroup: describe shows a group's members with what the group
// Lease grants each and what its member Lease says, the moves, the unowned
// shards and the tokens.
func TestDescribeGroup(t *testing.T) {
	judge := Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: 30 * time.Minute, PingTimeout: 5 * time.Second, DefaultLeaseDuration: 15 * time.Second}
	var cands []*coordinationv1beta1.LeaseCandidate
	for _, name := range []string{"a", "b"} {
		lc := cand(candSpec{name: name, binary: "1.36.0", emulation: "1.36.0", strategy: shard.StrategyShards})
		lc.Spec.LeaseName = "l"
		lc.Annotations = map[string]string{shard.DeclaredAnnotation: "5"}
		cands = append(cands, lc)
	}
	g := shard.Group{Generation: 4, Count: 5, Owners: []shard.Owner{{Member: "a", Epoch: 1}, {Member: "a", Epoch: 1}, {Member: "b", Epoch: 2}, {}, {Member: "b", Epoch: 2}},
		Tokens: []int64{1, 1, 2, 0, 3}, Moving: map[int]string{4: "a"}}
	ann, err := g.Annotations()
	if err != nil {
		t.Fatal(err)
	}
	l := lease(leaseSpec{strategy: shard.StrategyShards})
	l.Namespace, l.Name, l.Annotations = "ns", "l", ann
	renewed := metav1.NewMicroTime(now.Add(-2 * time.Second))
	memberLease := func(replica, holder string, epoch int32, acting, released string) *coordinationv1.Lease {
		m := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: shard.MemberLeaseName("l", replica),
			Annotations: map[string]string{shard.GroupAnnotation: "l", shard.ActingAnnotation: acting}},
			Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To(epoch), RenewTime: &renewed}}
		if holder != "" {
			m.Spec.HolderIdentity = ptr.To(holder)
		}
		if released != "" {
			m.Annotations[shard.ReleasedAnnotation] = released
		}
		return m
	}
	leases := []*coordinationv1.Lease{l, memberLease("a", "a", 1, "n=5;h=1;0-1=1", ""), memberLease("b", "b", 2, "n=5;h=3;2=2;4=3", ""),
		memberLease("c", "", 3, "n=5;h=6", "3=6")}
	in := Input{Key: types.NamespacedName{Namespace: "ns", Name: "l"}, Lease: l, Candidates: cands}
	s := judge.Summarize(in, now)
	d := Describe(&s, access.ModeNative, nil)
	DescribeGroup(d, &s, cands, leases)
	if d.Group == nil {
		t.Fatal("no group in the description")
	}
	var out bytes.Buffer
	if err := PrintDescription(&out, d, Format{}, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Shards: 5 (generation 4): 3 owned, 1 moving, 1 unowned, spread 0",
		"unowned: 3",
		"a 1 2 0-1 0-1 <none> epoch 1, renewed 2s ago 5",
		"b 2 2 2,4 2,4 <none> epoch 2, renewed 2s ago 5",
		"c - 0 <none> <none> 3=6 released (epoch 3) <none>",
		"4 b a",
		"0-1 1",
		"4 3",
		"- a 1.36.0 1.36.0 cle.dev/Shards",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), want) {
			t.Errorf("describe lacks %q:\n%s", want, out.String())
		}
	}
	if c := d.DeepCopy(); c.Group == d.Group || c.Group.Members[0].RenewTime == d.Group.Members[0].RenewTime {
		t.Error("DeepCopy shares the group")
	}
}
