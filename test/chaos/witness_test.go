package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// witnessWrite is what a leader sends to the witness (examples/candidate
// --witness-url).
type witnessWrite struct {
	Identity string    `json:"identity"`
	Token    int32     `json:"token"`
	Seq      int       `json:"seq"`
	Time     time.Time `json:"time"`
}

// record is one write as the witness received it.
type record struct {
	witnessWrite
	received time.Time
	accepted bool
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

	mu       sync.Mutex
	writes   []record
	newest   int32 // newest token accepted
	newestBy string
	owner    map[int32]string // token -> identity
	lastOf   map[string]time.Time
	firstOf  map[int32]time.Time
}

func newWitness(rec *recorder, lease string, v *violations) *witness {
	w := &witness{rec: rec, lease: lease, v: v, owner: map[int32]string{}, lastOf: map[string]time.Time{}, firstOf: map[int32]time.Time{}}
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
	var in witnessWrite
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	// The Lease as last observed, read before the write counts as received:
	// whatever it shows happened before this write arrived.
	lease, seenLease := w.rec.current(w.lease)
	now := time.Now()

	w.mu.Lock()
	defer w.mu.Unlock()
	r := record{witnessWrite: in, received: now, accepted: in.Token >= w.newest}
	w.writes = append(w.writes, r)
	if owner, ok := w.owner[in.Token]; ok && owner != in.Identity {
		w.v.add("two leaders: %s and %s both wrote with token %d", owner, in.Identity, in.Token)
	} else if !ok {
		w.owner[in.Token] = in.Identity
		w.firstOf[in.Token] = now
	}
	if !r.accepted {
		// The window of this term overlaps the newer one's: two leaders acted at once.
		w.v.add("stale write: %s wrote with token %d (seq %d) after %s's token %d was accepted", in.Identity, in.Token, in.Seq, w.newestBy, w.newest)
		http.Error(rw, fmt.Sprintf("token %d is older than %d", in.Token, w.newest), http.StatusConflict)
		return
	}
	if seenLease && lease.holder != in.Identity && lease.transitions > in.Token {
		w.v.add("accepted a stale token: %s wrote with token %d after the Lease was seen naming %q at term %d", in.Identity, in.Token, lease.holder, lease.transitions)
	}
	w.newest, w.newestBy = in.Token, in.Identity
	w.lastOf[in.Identity] = now
	rw.WriteHeader(http.StatusNoContent)
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
	maxGap                 time.Duration
	maxGapAt               time.Time
}

func (w *witness) stats() witnessStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := witnessStats{writes: len(w.writes), terms: len(w.owner)}
	var last time.Time
	for _, r := range w.writes {
		if !r.accepted {
			s.refused++
			continue
		}
		if !last.IsZero() && r.received.Sub(last) > s.maxGap {
			s.maxGap, s.maxGapAt = r.received.Sub(last), last
		}
		last = r.received
	}
	return s
}
