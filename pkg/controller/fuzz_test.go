package controller

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/strategy"
)

// FuzzReconcile drives election steps over Leases and LeaseCandidates decoded
// from fuzz input: nil and empty holders, absent, zero, negative and huge
// durations and fencing tokens, renew, ping and creation times in the past,
// the future or unset, versions drawn from a pool that includes two arbitrary
// strings, registered, third-party, empty and mixed strategies, priorities
// that do and do not parse, and candidates of other Leases and namespaces.
// After the initial objects come a few events (time passing, candidates
// renewing or leaving, the holder renewing), each followed by a step.
//
// It checks that nothing panics, that every write is one the API would accept
// and the election allows, that a vacant Lease whose candidates are all known
// alive goes to the candidate pkg/strategy ranks first, and that the whole
// transcript (writes, Events, requeues, errors) is the same whatever order the
// informers deliver the same objects in.
func FuzzReconcile(f *testing.F) {
	// See decodeScenario for the layout. Seeds: a vacant Lease with three
	// candidates of different versions; an expired Lease with a nil
	// holder, a huge duration and a stale preferredHolder; mixed and
	// third-party strategies at the top binary version; garbage versions
	// only; a held Lease whose better candidate goes silent; a Lease at the
	// highest fencing token.
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 3,
		0, 1, 1, 0, 0, 1,
		1, 0, 0, 0, 0, 1,
		2, 1, 0, 0, 1, 1,
	}, "1.31.0", "1.29.0")
	f.Add([]byte{1, 0, 5, 1, 2, 2, 1, 2,
		0, 0, 0, 0, 0x0d, 0,
		1, 1, 1, 0, 0x31, 1,
		0, 0, 3, 0, 1, 5, 1, 0,
	}, "1.30.0", "1.30.0")
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 4,
		0, 1, 1, 1, 0, 1,
		1, 1, 1, 3, 0, 1,
		2, 1, 1, 2, 0, 1,
		3, 0, 0, 0, 0, 1,
	}, "1.31.0", "1.30.0")
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 3,
		0, 7, 8, 0, 0, 1,
		1, 8, 7, 0, 0, 1,
		2, 6, 6, 2, 0, 0,
	}, "v1.31.0", " 1.2.3")
	f.Add([]byte{1, 3, 3, 2, 1, 0, 1, 2,
		0, 1, 1, 0, 0x10, 1,
		1, 0, 0, 0, 0, 1,
		0, 2, 0, 0, 1, 0, 0, 3, 0, 3,
	}, "1.31.0", "1.29.0")
	f.Add([]byte{1, 1, 1, 3, 3, 0, 1, 2,
		0, 0, 0, 0, 0, 0,
		1, 1, 1, 0, 0, 0,
		0, 3, 0, 3,
	}, "1.30.0", "1.30.0")
	f.Fuzz(checkScenario)
}

// TestReconcileRandomScenarios plays checkScenario over pseudo-random inputs
// from a fixed seed, the same every run: make test explores this far beyond
// FuzzReconcile's seeds with the race detector's build it already has.
// FuzzReconcile's coverage-guided run (make fuzz) needs every dependency
// compiled once more, instrumented, which costs a cold machine about 9
// minutes of CPU; make test leaves it out.
func TestReconcileRandomScenarios(t *testing.T) {
	inputs := 2000
	if testing.Short() {
		inputs = 200
	}
	versions := []string{"1.31.0", "1.30.0", "1.29.0", "1.31", "v1.31.0", " 1.2.3", "1.31.0-rc.1", "", "x"}
	rng := rand.New(rand.NewPCG(4355, 1))
	for i := range inputs {
		data := make([]byte, rng.IntN(64))
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		v1, v2 := versions[rng.IntN(len(versions))], versions[rng.IntN(len(versions))]
		if !t.Run(fmt.Sprint(i), func(t *testing.T) { checkScenario(t, data, v1, v2) }) {
			t.Fatalf("input %d: FuzzReconcile's input %#v, %q, %q (f.Add it to replay)", i, data, v1, v2)
		}
	}
}

// checkScenario plays the scenario the fuzz input decodes to, with the
// objects delivered in three orders, and checks it.
func checkScenario(t *testing.T, data []byte, v1, v2 string) {
	sc := decodeScenario(data, v1, v2)
	want := sc.run(t, sc.cands, false)
	n := len(sc.cands)
	orders := []struct {
		name       string
		cands      []*fuzzCandidate
		leaseFirst bool
	}{
		{"reversed, Lease first", reversed(sc.cands), true},
		{"rotated, Lease last", append(slices.Clone(sc.cands[min(1, n):]), sc.cands[:min(1, n)]...), false},
	}
	for _, o := range orders {
		if got := sc.run(t, o.cands, o.leaseFirst); got != want {
			t.Fatalf("the outcome depends on the order the informers deliver the objects in (%s)\n%s\nwant:\n%s\ngot:\n%s",
				o.name, sc, want, got)
		}
	}
}

// fuzzBytes hands out the fuzz input one byte at a time, zeros once it is
// used up.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return v
}

func pick[T any](b byte, xs ...T) T { return xs[int(b)%len(xs)] }

// fuzzCandidate is a candidate of the scenario and whether the informers
// deliver it in their initial list (its freshness unknown) or as created
// while the controller watches.
type fuzzCandidate struct {
	lc     *coordinationv1beta1.LeaseCandidate
	listed bool
}

type fuzzAction struct {
	kind byte // 0 time passes, 1 a candidate renews, 2 the holder renews, 3 a candidate is deleted
	arg  byte
}

type fuzzScenario struct {
	lease   *coordinationv1.Lease // nil: none
	cands   []*fuzzCandidate
	actions []fuzzAction
}

var (
	fuzzNames     = []string{"a", "b", "c", "d", "e", "f"}
	fuzzSteps     = []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 16 * time.Second, 5 * time.Minute, 31 * time.Minute}
	fuzzTimes     = []*time.Time{nil, ptr.To(t0.Add(-time.Minute)), ptr.To(t0.Add(time.Hour)), ptr.To(t0.Add(-31 * time.Minute)), ptr.To(time.Time{})}
	fuzzCreated   = []time.Time{t0.Add(-time.Hour), t0.Add(-time.Hour + 500*time.Millisecond), t0.Add(-2 * time.Hour), t0.Add(time.Hour)}
	fuzzStrats    = []coordinationv1.CoordinatedLeaseStrategy{oev, strategy.PriorityName, "example.com/custom", ""}
	fuzzPriority  = []string{"", "1", "10", "-3", "x", "2147483648"}
	fuzzDurations = []*int32{nil, ptr.To[int32](0), ptr.To[int32](1), ptr.To[int32](15), ptr.To[int32](3600), ptr.To[int32](math.MaxInt32), ptr.To[int32](-1)}
	fuzzTerms     = []*int32{nil, ptr.To[int32](0), ptr.To[int32](7), ptr.To[int32](math.MaxInt32), ptr.To[int32](-1)}
)

// decodeScenario reads:
//
//	8 bytes of Lease: present (even: no Lease), holder, leaseDurationSeconds,
//	  renewTime, leaseTransitions, preferredHolder, strategy, then the number
//	  of candidates
//	6 bytes per candidate: name (low bits), other namespace (bit 7), other
//	  Lease (bit 6); binaryVersion; emulationVersion; strategy (bits 0-1)
//	  and priority annotation (bits 2-4, 0: none); creation (bits 0-1), renewTime
//	  (bits 2-4) and pingTime (bits 5-7); listed (bit 0)
//	2 bytes per action, up to six
//
// Candidates with the name and namespace of an earlier one are dropped.
func decodeScenario(data []byte, v1, v2 string) *fuzzScenario {
	b := fuzzBytes(data)
	sc := &fuzzScenario{}
	present, holder, duration, renew, terms, preferred, strat, count := b.next(), b.next(), b.next(), b.next(), b.next(), b.next(), b.next(), b.next()
	holders := []*string{nil, ptr.To(""), ptr.To("outsider")}
	for _, n := range fuzzNames {
		holders = append(holders, ptr.To(n))
	}
	if present%2 == 1 {
		l := lease()
		l.Spec.HolderIdentity = pick(holder, holders...)
		l.Spec.LeaseDurationSeconds = pick(duration, fuzzDurations...)
		if rt := pick(renew, fuzzTimes...); rt != nil {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(*rt))
			l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(rt.Add(-time.Hour)))
		}
		l.Spec.LeaseTransitions = pick(terms, fuzzTerms...)
		l.Spec.PreferredHolder = pick(preferred, holders...)
		if s := pick(strat, append([]coordinationv1.CoordinatedLeaseStrategy{"-"}, fuzzStrats...)...); s != "-" {
			l.Spec.Strategy = ptr.To(s)
		}
		sc.lease = l
	}
	versions := []string{"1.30.0", "1.31.0", "1.29.0", "1.31.0-alpha.1", "1.31.0+build.1", "1.31", "", v1, v2}
	seen := map[string]bool{}
	for range int(count) % 7 {
		id, bin, emu, sp, times, flags := b.next(), b.next(), b.next(), b.next(), b.next(), b.next()
		ns, leaseName := testNS, testLease
		if id&0x80 != 0 {
			ns = "other"
		}
		if id&0x40 != 0 {
			leaseName = "other-lease"
		}
		name := pick(id&0x3f, fuzzNames...)
		if seen[ns+"/"+name] {
			continue
		}
		seen[ns+"/"+name] = true
		lc := candidate(name, pick(bin, versions...), pick(emu, versions...),
			forLease(leaseName), withStrategy(pick(sp&3, fuzzStrats...)), created(pick(times&3, fuzzCreated...)))
		lc.Namespace = ns
		lc.UID = types.UID("uid-" + ns + "-" + name)
		if p := int(sp>>2&7) % (len(fuzzPriority) + 1); p > 0 {
			withAnnotation(strategy.PriorityAnnotation, fuzzPriority[p-1])(lc)
		}
		lc.Spec.RenewTime = nil
		if rt := pick(times>>2&7, fuzzTimes...); rt != nil {
			lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(*rt))
		}
		if pt := pick(times>>5, fuzzTimes...); pt != nil {
			lc.Spec.PingTime = ptr.To(metav1.NewMicroTime(*pt))
		}
		sc.cands = append(sc.cands, &fuzzCandidate{lc: lc, listed: flags&1 == 1})
	}
	for len(b) > 0 && len(sc.actions) < 6 {
		sc.actions = append(sc.actions, fuzzAction{kind: b.next() % 4, arg: b.next()})
	}
	return sc
}

func reversed[T any](xs []T) []T {
	out := slices.Clone(xs)
	slices.Reverse(out)
	return out
}

func (sc *fuzzScenario) String() string {
	var s strings.Builder
	if sc.lease == nil {
		s.WriteString("no Lease\n")
	} else {
		fmt.Fprintf(&s, "Lease %s\n", describeLeaseSpec(sc.lease.Spec))
	}
	for _, c := range sc.cands {
		fmt.Fprintf(&s, "candidate %s/%s of %s: binary %q emulation %q strategy %q annotations %v created %s renew %v ping %v listed %v\n",
			c.lc.Namespace, c.lc.Name, c.lc.Spec.LeaseName, c.lc.Spec.BinaryVersion, c.lc.Spec.EmulationVersion, c.lc.Spec.Strategy,
			c.lc.Annotations, c.lc.CreationTimestamp.UTC(), microString(c.lc.Spec.RenewTime), microString(c.lc.Spec.PingTime), c.listed)
	}
	fmt.Fprintf(&s, "actions %v", sc.actions)
	return s.String()
}

func microString(t *metav1.MicroTime) string {
	if t == nil {
		return "<nil>"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func int32String(p *int32) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}

func describeLeaseSpec(s coordinationv1.LeaseSpec) string {
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return fmt.Sprintf("%q", *p)
	}
	strat := "<nil>"
	if s.Strategy != nil {
		strat = fmt.Sprintf("%q", *s.Strategy)
	}
	return fmt.Sprintf("holder=%s preferred=%s strategy=%s duration=%s transitions=%s acquire=%s renew=%s",
		str(s.HolderIdentity), str(s.PreferredHolder), strat, int32String(s.LeaseDurationSeconds),
		int32String(s.LeaseTransitions), microString(s.AcquireTime), microString(s.RenewTime))
}

// run plays the scenario with the candidates delivered in the order given
// (and the Lease before or after them), checks every write, and returns the
// transcript.
func (sc *fuzzScenario) run(t *testing.T, order []*fuzzCandidate, leaseFirst bool) string {
	t.Helper()
	h := newHarness(t)
	if sc.lease != nil && leaseFirst {
		h.list(sc.lease)
	}
	for _, c := range order {
		if c.listed {
			h.list(c.lc)
		} else {
			h.create(c.lc)
		}
	}
	if sc.lease != nil && !leaseFirst {
		h.list(sc.lease)
	}
	var out strings.Builder
	var hist termHistory
	if l := sc.lease; l != nil {
		hist.maxTerm = max(0, ptr.Deref(l.Spec.LeaseTransitions, 0))
		hist.held = true
	}
	step := func(what string) {
		before := h.serverSnapshot()
		h.clearWrites()
		d, err := h.reconcileOnly()
		writes := h.writes()
		fmt.Fprintf(&out, "%s: requeue %v, error %v\n", what, d, err != nil)
		for _, w := range writes {
			fmt.Fprintf(&out, "  %s\n", describeWrite(w))
			if msg := checkWrite(w, before, &hist); msg != "" {
				t.Fatalf("%s: %s: %s\n%s", what, w, msg, sc)
			}
		}
		for _, e := range h.takeEvents() {
			fmt.Fprintf(&out, "  event %s\n", e)
		}
		h.sync()
	}
	step("initial")
	sc.checkVacantElection(t, out.String())
	for i, a := range sc.actions {
		name := pick(a.arg, fuzzNames...)
		switch a.kind {
		case 0:
			h.step(pick(a.arg, fuzzSteps...))
		case 1:
			if h.serverObject(candidatesGVR, name) != nil {
				h.renew(name, h.clock.Now())
			}
		case 2:
			if h.serverLease() != nil {
				h.renewLease(h.clock.Now())
			}
		case 3:
			if h.serverObject(candidatesGVR, name) != nil {
				h.deleteCandidate(name)
			}
		}
		step(fmt.Sprintf("action %d %v", i, a))
	}
	return out.String()
}

// checkVacantElection checks the first step against pkg/strategy when there
// is no Lease and every candidate of it was seen created (so known alive):
// the winner is the candidate the strategy ranks first, or nobody, with the
// reason as an Event.
func (sc *fuzzScenario) checkVacantElection(t *testing.T, transcript string) {
	t.Helper()
	if sc.lease != nil {
		return
	}
	var cands []*coordinationv1beta1.LeaseCandidate
	for _, c := range sc.cands {
		if c.lc.Namespace != testNS || c.lc.Spec.LeaseName != testLease {
			continue
		}
		if c.listed {
			return // its freshness is unknown: it is pinged first
		}
		cands = append(cands, c.lc)
	}
	want := "no write"
	res := strategy.ResolveStrategy(cands)
	s, registered := strategy.NewDefaultRegistry().Get(res.Strategy)
	switch {
	case len(cands) == 0:
	case res.Conflict:
		want = "event Warning " + ReasonStrategyConflict
	case res.BinaryVersion == "":
		want = "event Warning " + ReasonInvalidCandidate
	case !registered:
	default:
		if best, _ := strategy.Best(s, cands); best != nil {
			want = fmt.Sprintf("create leases/%s holder=%q", testLease, best.Name)
		} else {
			want = "event Warning " + ReasonNoEligible
		}
	}
	block := initialBlock(transcript)
	writes := 0
	for _, line := range block {
		if strings.HasPrefix(line, "create ") || strings.HasPrefix(line, "update ") {
			writes++
		}
	}
	switch {
	case strings.HasPrefix(want, "create "):
		if writes != 1 || !strings.HasPrefix(block[0], want) {
			t.Fatalf("vacant Lease: want only %s (pkg/strategy's choice)\n%s\n%s", want, sc, transcript)
		}
	case writes > 0:
		t.Fatalf("vacant Lease: want no write\n%s\n%s", sc, transcript)
	case want != "no write" && !slices.ContainsFunc(block, func(l string) bool { return strings.HasPrefix(l, want+" ") }):
		t.Fatalf("vacant Lease: want %s\n%s\n%s", want, sc, transcript)
	}
}

// initialBlock returns the writes and Events of the first step of a
// transcript.
func initialBlock(transcript string) []string {
	var out []string
	for i, line := range strings.Split(transcript, "\n") {
		if i == 0 {
			continue
		}
		if !strings.HasPrefix(line, "  ") {
			break
		}
		out = append(out, strings.TrimSpace(line))
	}
	return out
}

// termHistory is what a Lease's fencing token must stay above: the highest
// leaseTransitions seen, and whether the Lease has existed (a first creation
// starts at 0; every later election goes above every term seen).
type termHistory struct {
	maxTerm int32
	held    bool
}

// describeWrite says what a write changed, without resourceVersions (which
// only count writes).
func describeWrite(w written) string {
	switch {
	case w.lease != nil:
		return fmt.Sprintf("%s leases/%s %s", w.verb, w.name, describeLeaseSpec(w.lease.Spec))
	case w.cand != nil:
		return fmt.Sprintf("%s leasecandidates/%s/%s pingTime=%s", w.verb, w.cand.Namespace, w.name, microString(w.cand.Spec.PingTime))
	default:
		return w.String()
	}
}

// serverSnapshot copies the Lease and candidates as stored.
func (h *harness) serverSnapshot() map[string]runtime.Object {
	out := map[string]runtime.Object{}
	for _, obj := range h.serverObjects(candidatesGVR, "LeaseCandidate") {
		out["leasecandidates/"+mustKey(obj)] = obj.DeepCopyObject()
	}
	for _, obj := range h.serverObjects(leasesGVR, "Lease") {
		out["leases/"+mustKey(obj)] = obj.DeepCopyObject()
	}
	return out
}

func (h *harness) serverObject(gvr schema.GroupVersionResource, name string) runtime.Object {
	obj, err := h.client.Tracker().Get(gvr, testNS, name)
	if err != nil {
		return nil
	}
	return obj
}

// checkWrite reports what is wrong with one of the controller's writes, given
// the objects as stored before the step: a write the API would reject, or one
// the election semantics forbid.
func checkWrite(w written, before map[string]runtime.Object, hist *termHistory) string {
	if w.verb == "delete" {
		return "an election step deletes nothing"
	}
	ns := mustMeta(w.obj).GetNamespace()
	if ns != testNS {
		return "wrote an object of another namespace"
	}
	if w.cand != nil {
		old, ok := before["leasecandidates/"+ns+"/"+w.name].(*coordinationv1beta1.LeaseCandidate)
		if !ok {
			return "pinged a candidate that does not exist"
		}
		if old.Spec.LeaseName != testLease {
			return "pinged a candidate of another Lease"
		}
		if w.cand.Spec.PingTime == nil {
			return "a ping without pingTime"
		}
		cleared := w.cand.DeepCopy()
		cleared.Spec.PingTime = old.Spec.PingTime
		if !apiequality.Semantic.DeepEqual(cleared.Spec, old.Spec) || !apiequality.Semantic.DeepEqual(cleared.Annotations, old.Annotations) {
			return "a ping changed more than pingTime"
		}
		return ""
	}
	l := w.lease
	if l == nil || w.name != testLease {
		return "wrote something other than the Lease or a candidate of it"
	}
	isCandidate := func(name string) bool {
		lc, ok := before["leasecandidates/"+testNS+"/"+name].(*coordinationv1beta1.LeaseCandidate)
		return ok && lc.Spec.LeaseName == testLease
	}
	old, _ := before["leases/"+testNS+"/"+testLease].(*coordinationv1.Lease)
	// A value the API rejects is the controller's doing unless the stored
	// Lease had it already (only a scenario the API would not accept has
	// one).
	kept := func(get func(*coordinationv1.Lease) *int32) bool {
		return old != nil && ptr.Equal(get(old), get(l))
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d <= 0 && !kept(func(l *coordinationv1.Lease) *int32 { return l.Spec.LeaseDurationSeconds }) {
		return fmt.Sprintf("leaseDurationSeconds %d: the API requires more than 0", *d)
	}
	if n := l.Spec.LeaseTransitions; n != nil && *n < 0 && !kept(func(l *coordinationv1.Lease) *int32 { return l.Spec.LeaseTransitions }) {
		return fmt.Sprintf("leaseTransitions %d: the API requires at least 0", *n)
	}
	if s := l.Spec.Strategy; s == nil || (*s != oev && *s != strategy.PriorityName) {
		return "the Lease's strategy is not one this controller elects for"
	}
	if p := l.Spec.PreferredHolder; p != nil && !isCandidate(*p) {
		return fmt.Sprintf("preferredHolder %q is not a candidate of the Lease", *p)
	}
	term := ptr.Deref(l.Spec.LeaseTransitions, 0)
	defer func() { hist.maxTerm = max(hist.maxTerm, term) }()
	// An election names the holder anew, in a new term, acquired and renewed
	// now; steering leaves all of that as it is.
	elected := old == nil || holderOf(l) != holderOf(old) || !ptr.Equal(l.Spec.LeaseTransitions, old.Spec.LeaseTransitions) ||
		!apiequality.Semantic.DeepEqual(l.Spec.AcquireTime, old.Spec.AcquireTime) || !apiequality.Semantic.DeepEqual(l.Spec.RenewTime, old.Spec.RenewTime)
	if elected {
		holder := holderOf(l)
		if !isCandidate(holder) {
			return fmt.Sprintf("elected %q, which is not a candidate of the Lease", holder)
		}
		if l.Spec.PreferredHolder != nil {
			return "elected with a preferredHolder left in place"
		}
		if hist.held && term <= hist.maxTerm {
			return fmt.Sprintf("elected in term %d, not above every term seen (%d)", term, hist.maxTerm)
		}
		hist.held = true
		return ""
	}
	return ""
}
