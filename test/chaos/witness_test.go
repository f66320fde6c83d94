package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	wire "github.com/cle-dev/cle/internal/witness"
)

// record is one write as the witness received it.
type record struct {
	wire.Write
	received time.Time
	// passed is when the write got past the sender's write guard, on the
	// machine's clock: the last moment its sender decided, as leader, to
	// make it.
	passed   time.Time
	accepted bool
	// late marks a refused write that got past its guard before any newer
	// term's first write did, and arrived after one: held in a frozen or
	// starved sender, delivered late, and refused by the token as fencing
	// is meant to.
	late bool
}

// witness stands for a resource guarded by the Lease: it accepts a write
// whose token is at least the newest it has accepted and refuses an older
// one, as a fenced resource does, and it checks each write against the
// invariants as it arrives.
type witness struct {
	srv   *httptest.Server
	rec   *recorder
	lease string
	v     *violations
	// offsetOf is how far identity's clock is off the machine's.
	offsetOf func(identity string) time.Duration

	mu       sync.Mutex
	writes   []record
	newest   int32 // newest token accepted
	newestBy string
	owner    map[int32]string // token -> identity
	lastOf   map[string]time.Time
	// firstPassed is, per token, the earliest a write of its term that
	// reached the witness got past the guard.
	firstPassed map[int32]time.Time
}

func newWitness(rec *recorder, lease string, v *violations, offsetOf func(string) time.Duration) *witness {
	w := &witness{rec: rec, lease: lease, v: v, offsetOf: offsetOf, owner: map[int32]string{}, lastOf: map[string]time.Time{},
		firstPassed: map[int32]time.Time{}}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	return w
}

func (w *witness) URL() string { return w.srv.URL + "/write" }

func (w *witness) Close() { w.srv.Close() }

func (w *witness) serve(rw http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(rw, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var in wire.Write
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	passed, err := time.Parse(time.RFC3339Nano, req.Header.Get(wire.GuardPassedHeader))
	if err != nil {
		w.v.add("witness write from %s without a valid %s header: %v", in.Identity, wire.GuardPassedHeader, err)
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	passed = passed.Add(-w.offsetOf(in.Identity))
	// The Lease as last observed, read before the write counts as received:
	// whatever it shows happened before this write arrived.
	lease, seenLease := w.rec.current(w.lease)
	now := time.Now()

	w.mu.Lock()
	defer w.mu.Unlock()
	r := record{Write: in, received: now, passed: passed, accepted: in.Token >= w.newest}
	if !r.accepted {
		successor, succeeded := w.successorFirstPassed(in.Token)
		r.late = succeeded && passed.Before(successor)
	}
	w.writes = append(w.writes, r)
	if owner, ok := w.owner[in.Token]; ok && owner != in.Identity {
		w.v.add("two leaders: %s and %s both wrote with token %d", owner, in.Identity, in.Token)
	} else if !ok {
		w.owner[in.Token] = in.Identity
	}
	if !r.accepted {
		if !r.late {
			// The window of this term overlaps a newer one's: two leaders acted at once.
			successor, _ := w.successorFirstPassed(in.Token)
			w.v.add("stale write: %s wrote with token %d (seq %d), past its guard %s after a newer term's first write was, and arrived after %s's token %d was accepted",
				in.Identity, in.Token, in.Seq, passed.Sub(successor).Round(time.Millisecond), w.newestBy, w.newest)
		}
		http.Error(rw, fmt.Sprintf("token %d is older than %d", in.Token, w.newest), http.StatusConflict)
		return
	}
	if seenLease && lease.holder != in.Identity && lease.transitions > in.Token {
		w.v.add("accepted a stale token: %s wrote with token %d after the Lease was seen naming %q at term %d", in.Identity, in.Token, lease.holder, lease.transitions)
	}
	w.newest, w.newestBy = in.Token, in.Identity
	w.lastOf[in.Identity] = now
	if first, ok := w.firstPassed[in.Token]; !ok || passed.Before(first) {
		w.firstPassed[in.Token] = passed
	}
	rw.WriteHeader(http.StatusNoContent)
}

// successorFirstPassed returns the earliest moment a write of a term newer
// than token got past its guard, among the writes accepted so far. Called
// with w.mu held.
func (w *witness) successorFirstPassed(token int32) (time.Time, bool) {
	var first time.Time
	for t, p := range w.firstPassed {
		if t > token && (first.IsZero() || p.Before(first)) {
			first = p
		}
	}
	return first, !first.IsZero()
}

// acceptedAfter returns identity's first write accepted after t.
func (w *witness) acceptedAfter(identity string, t time.Time) (record, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.writes {
		if r.accepted && r.Identity == identity && !r.received.Before(t) {
			return r, true
		}
	}
	return record{}, false
}

// stats summarises the writes: how many, how many refused, how many terms,
// and the longest time without an accepted write between the first and the
// last one.
type witnessStats struct {
	writes, refused, terms int
	// late are the refused writes that were delivered late rather than
	// made after a successor acted (record.late).
	late     int
	maxGap   time.Duration
	maxGapAt time.Time
}

func (w *witness) stats() witnessStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := witnessStats{writes: len(w.writes), terms: len(w.owner)}
	var last time.Time
	for _, r := range w.writes {
		if !r.accepted {
			s.refused++
			if r.late {
				s.late++
			}
			continue
		}
		if !last.IsZero() && r.received.Sub(last) > s.maxGap {
			s.maxGap, s.maxGapAt = r.received.Sub(last), last
		}
		last = r.received
	}
	return s
}

// identityStats are one writer's accepted writes and the terms they were
// made in.
type identityStats struct{ writes, terms int }

// byIdentity returns each writer's accepted writes and terms.
func (w *witness) byIdentity() map[string]identityStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]identityStats{}
	for _, r := range w.writes {
		if !r.accepted {
			continue
		}
		s := out[r.Identity]
		s.writes++
		out[r.Identity] = s
	}
	for _, owner := range w.owner {
		s := out[owner]
		s.terms++
		out[owner] = s
	}
	return out
}
