package simworld

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newWorld() *World { return New(rand.New(rand.NewPCG(1, 2)), t0, false) }

// run runs every event up to end, and ends there.
func run(w *World, end time.Time) {
	w.At(end, func() {})
	for w.Step(end) {
	}
}

func TestEventsRunInOrder(t *testing.T) {
	w := newWorld()
	var got []int
	w.After(2*time.Second, func() { got = append(got, 3) })
	w.After(time.Second, func() { got = append(got, 1) })
	w.After(time.Second, func() { got = append(got, 2) }) // same instant: in order of scheduling
	w.At(t0.Add(-time.Hour), func() { got = append(got, 0) })
	w.After(time.Minute, func() { got = append(got, 4) })
	run(w, t0.Add(10*time.Second))
	if want := []int{0, 1, 2, 3}; !equal(got, want) {
		t.Errorf("ran %v, want %v (the event after the end not run)", got, want)
	}
	if !w.Now.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("Now = %s, want the end", w.Now.Sub(t0))
	}
}

// TestStoppedTimersDoNotRun: a stopped timer's event leaves the schedule
// without running or counting as a step, also once a process's clock has
// set it again.
func TestStoppedTimersDoNotRun(t *testing.T) {
	w := newWorld()
	var got []int
	stopped, kept := &Timer{}, &Timer{}
	w.AfterTimer(time.Second, stopped, func() { got = append(got, 1) })
	w.AfterTimer(2*time.Second, kept, func() { got = append(got, 2) })
	w.After(3*time.Second, func() { got = append(got, 3) })
	stopped.Stop()
	var nilTimer *Timer
	nilTimer.Stop() // none: nothing to stop
	steps := 0
	for w.Step(t0.Add(time.Minute)) {
		steps++
		if len(got) == 1 && !w.Now.Equal(t0.Add(2*time.Second)) {
			t.Errorf("the first event to run ran at %s, want 2s (the stopped timer skipped)", w.Now.Sub(t0))
		}
	}
	if want := []int{2, 3}; !equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
	if steps != 2 || w.steps != 2 {
		t.Errorf("Step reported %d events and counted %d, want 2: a stopped timer is no step", steps, w.steps)
	}
	// A process's timer, stopped after its clock moved it on: it does not
	// run when rescheduled either.
	c := w.NewClock(0, 0, w.Now)
	c.Alive = func() bool { return true }
	tm := &Timer{}
	ran := false
	c.AfterTimer(time.Second, tm, func() { ran = true })
	tm.Stop()
	run(w, w.Now.Add(time.Minute))
	if ran {
		t.Error("a process's stopped timer ran")
	}
}

// TestTiesDrawTheOrderAtOneInstant: with Ties, the events due at one
// instant run in an order the stream draws (the same for the same seed, not
// the order of scheduling for every seed), while a watch's events and a
// list that ListAt schedules keep their order among them.
func TestTiesDrawTheOrderAtOneInstant(t *testing.T) {
	order := func(seed uint64) (ran, watched []string) {
		w := newWorld()
		w.Ties = rand.New(rand.NewPCG(seed, 3))
		s := NewServer(w, "ns")
		sw := s.Watch(func(obj runtime.Object, _ bool) {
			watched = append(watched, obj.(*coordinationv1.Lease).ResourceVersion)
		})
		sw.StalledUntil = t0.Add(time.Second) // everything sent arrives then
		for _, name := range []string{"a", "b", "c", "d"} {
			w.At(t0.Add(time.Second), func() { ran = append(ran, name) })
		}
		for _, rv := range []string{"1", "2", "3"} {
			l := &coordinationv1.Lease{}
			l.ResourceVersion = rv
			sw.Send(l, false)
		}
		ListAt(w, t0.Add(time.Second), func() { watched = append(watched, "list") }, sw)
		l := &coordinationv1.Lease{}
		l.ResourceVersion = "4"
		sw.Send(l, false)
		run(w, t0.Add(time.Minute))
		return ran, watched
	}
	orders := map[string]bool{}
	for seed := range uint64(20) {
		ran, watched := order(seed)
		again, watchedAgain := order(seed)
		if !equal(ran, again) || !equal(watched, watchedAgain) {
			t.Fatalf("seed %d: ran %v then %v, watched %v then %v: not a function of the seed", seed, ran, again, watched, watchedAgain)
		}
		if want := []string{"1", "2", "3", "list", "4"}; !equal(watched, want) {
			t.Errorf("seed %d: the watcher saw %v, want %v", seed, watched, want)
		}
		orders[strings.Join(ran, "")] = true
	}
	if len(orders) < 5 {
		t.Errorf("20 seeds ran four events due at one instant in %d orders (%v), want them drawn", len(orders), orders)
	}
}

func TestWatcherKeepsOrderAndStalls(t *testing.T) {
	w := newWorld()
	s := NewServer(w, "ns")
	s.LagBase = 500 * time.Millisecond
	var got []string
	var at []time.Time
	sw := s.Watch(func(obj runtime.Object, _ bool) {
		got = append(got, obj.(*coordinationv1.Lease).ResourceVersion)
		at = append(at, w.Now)
	})
	sw.StalledUntil = t0.Add(5 * time.Second)
	for i, rv := range []string{"a", "b", "c"} {
		l := &coordinationv1.Lease{}
		l.ResourceVersion = rv
		w.After(time.Duration(i)*time.Millisecond, func() { sw.Send(l, false) })
	}
	run(w, t0.Add(time.Minute))
	if want := []string{"a", "b", "c"}; !equal(got, want) {
		t.Errorf("delivered %q, want %q", got, want)
	}
	for i := range at {
		if at[i].Before(sw.StalledUntil) || (i > 0 && at[i].Before(at[i-1])) {
			t.Errorf("event %d delivered at %s: before the stall ended or before an earlier event", i, at[i].Sub(t0))
		}
	}
	sw.Expire()
	sw.Send(&coordinationv1.Lease{}, false)
	run(w, t0.Add(2*time.Minute))
	if len(got) != 3 {
		t.Errorf("an expired watch delivered an event")
	}
	// An event on its way when the watch ends is lost with it, even once
	// the watch goes on (after its watcher's relist).
	sw.Expired = false
	late := &coordinationv1.Lease{}
	late.ResourceVersion = "d"
	sw.Send(late, false)
	sw.Expire()
	sw.Expired = false
	run(w, t0.Add(3*time.Minute))
	if len(got) != 3 {
		t.Errorf("an event sent before the watch ended was delivered after it: %q", got)
	}
}

// TestFrontendsLagApart: two watchers of one write, on replicas whose
// caches are behind by different times, receive it that far apart; a
// cache that catches up keeps its watchers' order.
func TestFrontendsLagApart(t *testing.T) {
	w := newWorld()
	s := NewServer(w, "ns")
	s.LagBase = time.Millisecond
	prompt, behind := &Frontend{Name: "a"}, &Frontend{Name: "b", Behind: 3 * time.Second}
	arrived := map[string][]time.Time{}
	watch := func(f *Frontend) *Watcher {
		sw := s.Watch(func(runtime.Object, bool) { arrived[f.Name] = append(arrived[f.Name], w.Now) })
		sw.Frontend = f
		return sw
	}
	a, b := watch(prompt), watch(behind)
	l := &coordinationv1.Lease{}
	a.Send(l, false)
	b.Send(l, false)
	w.After(time.Second, func() {
		behind.Behind = 0 // caught up: the next event may not overtake the first
		b.Send(l, false)
	})
	run(w, t0.Add(time.Minute))
	if len(arrived["a"]) != 1 || arrived["a"][0].After(t0.Add(10*time.Millisecond)) {
		t.Errorf("the prompt replica's watcher received the write at %v, want once within 10ms", arrived["a"])
	}
	got := arrived["b"]
	if len(got) != 2 || got[0].Before(t0.Add(3*time.Second)) || got[1].Before(got[0]) {
		t.Errorf("the lagging replica's watcher received the writes at %v, want the first 3s late and the second after it", got)
	}
	if d := s.LagVia(behind); d > 10*time.Millisecond {
		t.Errorf("LagVia a replica caught up = %s, want the server's lag alone", d)
	}
}

func TestWritePreconditions(t *testing.T) {
	w := newWorld()
	s := NewServer(w, "ns")
	none := func() []*Watcher { return nil }
	if _, err := s.WriteLease("ns", "l", &coordinationv1.Lease{}, "1", "test", none); !apierrors.IsNotFound(err) {
		t.Errorf("update of a Lease that does not exist: %v, want NotFound", err)
	}
	created, err := s.WriteLease("ns", "l", &coordinationv1.Lease{}, "", "test", none)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteLease("ns", "l", &coordinationv1.Lease{}, "", "test", none); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}
	updated, err := s.WriteLease("ns", "l", created, created.ResourceVersion, "test", none)
	if err != nil || updated.UID != created.UID || updated.ResourceVersion == created.ResourceVersion {
		t.Errorf("update: %v, UID %s → %s, resourceVersion %s → %s", err, created.UID, updated.UID, created.ResourceVersion, updated.ResourceVersion)
	}
	if _, err := s.WriteLease("ns", "l", created, created.ResourceVersion, "test", none); !apierrors.IsConflict(err) {
		t.Errorf("update on a stale resourceVersion: %v, want Conflict", err)
	}
	if _, err := s.WriteLease("ns", "l", nil, updated.ResourceVersion, "test", none); err != nil || s.Lease(Key("ns", "l")) != nil {
		t.Errorf("delete: %v, stored %v", err, s.Lease(Key("ns", "l")))
	}
	again, _ := s.WriteLease("ns", "l", &coordinationv1.Lease{}, "", "test", none)
	if again.UID == created.UID {
		t.Error("a Lease created again kept the old UID")
	}
}

func TestClockSuspend(t *testing.T) {
	w := newWorld()
	c := w.NewClock(time.Minute, 0, t0)
	c.Monotonic = true
	c.Alive = func() bool { return true }
	var held []func()
	c.Hold = func(fn func()) { held = append(held, fn) }
	var fired time.Time
	c.After(10*time.Second, func() { fired = w.Now })
	w.After(2*time.Second, c.Suspend)
	w.After(32*time.Second, func() {
		c.Resume()
		for _, fn := range held {
			fn()
		}
	})
	run(w, t0.Add(5*time.Second))
	if got := c.Mono(); got != 2*time.Second {
		t.Errorf("monotonic reading during a suspend = %s, want it stopped at 2s", got)
	}
	if got := c.Wall().Sub(t0); got != time.Minute+5*time.Second {
		t.Errorf("wall reading = %s after 5s, want the offset 1m plus 5s", got)
	}
	if got, want := c.Now().Sub(c.Now().Add(-time.Second)), time.Second; got != want {
		t.Errorf("instants of the clock differ by %s, want %s", got, want)
	}
	run(w, t0.Add(time.Minute))
	if want := t0.Add(40 * time.Second); !fired.Equal(want) {
		t.Errorf("a 10s timer set before a 30s suspend fired at %s, want %s", fired.Sub(t0), want.Sub(t0))
	}
	c.Step(-2 * time.Minute)
	if got := c.Wall().Sub(t0.Add(time.Minute)); got != -time.Minute {
		t.Errorf("wall reading a minute in, after a step back of 2m = %s from true time, want -1m (the offset 1m, less 2m)", got)
	}
	if got := c.Mono(); got != 30*time.Second {
		t.Errorf("monotonic reading = %s, want 30s (a minute, less the suspend)", got)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A server of bounded Capacity applies requests one after another, each
// 1/Capacity after the last, a flood holds up what comes next, and an answer
// comes only after its request was applied.
func TestServerQueuesRequests(t *testing.T) {
	w := newWorld()
	s := NewServer(w, "ns")
	if at := s.Apply(func() {}); !at.Equal(t0) {
		t.Errorf("without a Capacity a request is applied %s after it arrives, want at once", at.Sub(t0))
	}
	s.Capacity = 10
	var applied []time.Duration
	var arrived []time.Time
	apply := func() {
		applied = append(applied, w.Now.Sub(t0))
		arrived = append(arrived, s.Arrived())
	}
	for range 3 {
		s.Apply(apply)
	}
	var appliedAt time.Time
	var answered time.Duration
	w.After(time.Second, func() {
		s.Flood(2 * time.Second)
		appliedAt = s.Apply(apply)
	})
	// Its answer is scheduled 50ms after it was sent, as if it were not
	// held up.
	w.After(time.Second+50*time.Millisecond, s.Answered(&appliedAt, 50*time.Millisecond, func() { answered = w.Now.Sub(t0) }))
	run(w, t0.Add(time.Minute))
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 3100 * time.Millisecond}; !equal(applied, want) {
		t.Errorf("applied at %v, want %v", applied, want)
	}
	if !arrived[2].Equal(t0) || !arrived[3].Equal(t0.Add(time.Second)) {
		t.Errorf("requests arrived at %v, want the instants they were sent", arrived)
	}
	if answered != 3150*time.Millisecond {
		t.Errorf("answered at %s, want 50ms after it was applied (3.15s)", answered)
	}
	if s.MaxQueued != 2*time.Second {
		t.Errorf("MaxQueued %s, want the 2s the request after the flood waited", s.MaxQueued)
	}
}
