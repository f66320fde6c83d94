package bench

import (
	"testing"
	"time"
)

func TestShardEvent(t *testing.T) {
	e, ok := shardEvent("started-shard identity=r1 shard=7 token=3 at=1700000000123456789")
	if !ok || e.what != "started-shard" || e.shard != 7 || e.at.UnixNano() != 1700000000123456789 {
		t.Errorf("started-shard line read as %+v, %v", e, ok)
	}
	for _, line := range []string{
		"started-leading identity=r1",
		"stopped-shard identity=r1 token=3 at=1",
		"stopped-shard identity=r1 shard=2 token=3",
		"stopped-shard identity=r1 shard=2 at=soon",
		"",
	} {
		if e, ok := shardEvent(line); ok {
			t.Errorf("%q read as an event: %+v", line, e)
		}
	}
}

// TestReplay judges a step of four shards over two replicas: a is alone,
// b joins and takes two shards, one of them while a still acts on it.
func TestReplay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(ms int, id, what string, s int) event { return event{id: id, what: what, shard: s, at: at(ms)} }
	evs := []event{
		ev(-500, "a", "started-shard", 0), ev(-500, "a", "started-shard", 1),
		ev(-500, "a", "started-shard", 2), ev(-500, "a", "started-shard", 3),
		// Read out of order: replay orders by the replicas' times.
		ev(300, "b", "started-shard", 3),
		ev(100, "a", "stopped-shard", 2),
		ev(400, "b", "started-shard", 2),
		ev(350, "a", "stopped-shard", 3), // b started it at 300: two at once
	}
	res := replay(evs, 4, []string{"a", "b"}, t0, at(1000))
	want := stepResult{
		ownedIn:        0, // a owns every shard at t0
		balancedIn:     400 * time.Millisecond,
		longestUnowned: 300 * time.Millisecond, // shard 2, 100 → 400
		doubled:        1,
		starts:         2,
		spread:         0,
	}
	if res != want {
		t.Errorf("replay = %+v, want %+v", res, want)
	}

	// Up to 390ms, shard 2 is unowned since 100ms and b has one shard.
	if res := replay(evs, 4, []string{"a", "b"}, t0, at(390)); res.balancedIn != -1 || res.longestUnowned != 290*time.Millisecond || res.spread != 1 {
		t.Errorf("replay to 390ms = %+v, want not balanced, shard 2 unowned for 290ms, spread 1", res)
	}
	// A replica that is not live owns nothing that counts.
	if res := replay(evs, 4, []string{"b"}, t0, at(1000)); res.ownedIn != -1 || res.balancedIn != -1 {
		t.Errorf("replay with only b live = %+v, want never owned", res)
	}
	// Three live replicas, one owning nothing: owned, never balanced.
	if res := replay(evs, 4, []string{"a", "b", "c"}, t0, at(1000)); res.ownedIn != 0 || res.balancedIn != -1 || res.spread != 2 {
		t.Errorf("replay with c live and idle = %+v, want owned, never balanced, spread 2", res)
	}
}
