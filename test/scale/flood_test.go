package main

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestLatencies(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var l latencies
	at := func(answered, took time.Duration) {
		l.samples = append(l.samples, latency{took: took, answered: t0.Add(answered)})
	}
	// During a flood that ends at 10 s: slow writes.
	for i := range 100 {
		at(time.Duration(i)*100*time.Millisecond, time.Duration(i+1)*10*time.Millisecond)
	}
	// After it: a write sent before the end and answered late, a slow one,
	// then prompt ones.
	at(11*time.Second, 2*time.Second)
	at(12*time.Second, 900*time.Millisecond)
	at(13*time.Second, 100*time.Millisecond)
	at(14*time.Second, 50*time.Millisecond)

	n, p50, p99, longest := l.between(t0, t0.Add(10*time.Second))
	if n != 100 || p50 != 510*time.Millisecond || p99 != time.Second || longest != time.Second {
		t.Errorf("during: %d writes, median %s, p99 %s, longest %s; want 100, 510ms, 1s, 1s", n, p50, p99, longest)
	}
	if n, _, _, longest := l.between(t0.Add(10*time.Second), t0.Add(15*time.Second)); n != 4 || longest != 2*time.Second {
		t.Errorf("after: %d writes, longest %s; want 4, 2s", n, longest)
	}
	// Prompt from 13 s on, but a slow one at 15 s; prompt again from 16 s
	// to 22 s.
	at(15*time.Second, 400*time.Millisecond)
	for i := range 7 {
		at(time.Duration(16+i)*time.Second, 20*time.Millisecond)
	}
	if got := l.promptAfter(t0.Add(10*time.Second), promptWrite, 5*time.Second); !got.Equal(t0.Add(16 * time.Second)) {
		t.Errorf("caught up at %s, want 16s in", got.Sub(t0))
	}
	if got := l.promptAfter(t0.Add(10*time.Second), promptWrite, time.Second); !got.Equal(t0.Add(13 * time.Second)) {
		t.Errorf("caught up (1s window) at %s, want 13s in", got.Sub(t0))
	}
	if got := l.promptAfter(t0.Add(10*time.Second), promptWrite, 10*time.Second); !got.IsZero() {
		t.Errorf("caught up (10s window, writes end first) at %s, want never", got.Sub(t0))
	}
}

func TestWrongFirstKinds(t *testing.T) {
	f := &fleet{firstRV: map[types.NamespacedName]int64{}, openedRV: map[types.NamespacedName]int64{}, createdRV: map[types.NamespacedName]int64{}}
	lease := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "scale-0", Name: name} }
	best := func(name string) types.NamespacedName { return lease(candidateName(name, 0)) }
	// Each Lease created at 100, its first holder named at 200. a: its best
	// registered before the creation; b: between; c: after the naming; d:
	// its best's creation was not answered (unknown: counted late).
	for _, n := range []string{"a", "b", "c", "d"} {
		f.openedRV[lease(n)], f.firstRV[lease(n)] = 100, 200
	}
	f.createdRV[best("a")], f.createdRV[best("b")], f.createdRV[best("c")] = 50, 150, 250
	early, between, late, examples := f.wrongFirstKinds()
	if early != 1 || between != 1 || late != 2 || len(examples) != 1 {
		t.Errorf("early %d, between %d, late %d, examples %q; want 1, 1, 2, one", early, between, late, examples)
	}
}
