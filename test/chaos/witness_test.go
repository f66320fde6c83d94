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

// witness stands for resources guarded by the Lease and by each shard of the
// group: for each it accepts a write whose token is at least the newest it
// has accepted and refuses an older one, as a fenced resource does, and it
// checks each write against the invariants as it arrives.
type witness struct {
	srv   *httptest.Server
	rec   *recorder
	lease string
	v     *violations
	// offsetOf is how far identity's clock is off the machine's.
	offsetOf func(identity string) time.Duration

	mu     sync.Mutex
	fences map[int]*fence // by shard; leaseFence for the Lease's leaders
}

// leaseFence is the key of the Lease's resource among the witness's fences;
// a shard's is its index.
const leaseFence = -1

// fence is one guarded resource: the writes it received, and what it
// accepted.
type fence struct {
	writes   []record
	newest   int64 // newest token accepted
	newestBy string
	owner    map[int64]string // token -> identity
	// firstPassed is, per token, the earliest a write of its term that
	// reached the witness got past the guard.
	firstPassed map[int64]time.Time
}

func newWitness(rec *recorder, lease string, v *violations, offsetOf func(string) time.Duration) *witness {
	w := &witness{rec: rec, lease: lease, v: v, offsetOf: offsetOf, fences: map[int]*fence{}}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	return w
}

func (w *witness) URL() string { return w.srv.URL + "/write" }

func (w *witness) Close() { w.srv.Close() }

// fence returns the fence of key, made on first use. Called with w.mu held.
func (w *witness) fence(key int) *fence {
	f := w.fences[key]
	if f == nil {
		f = &fence{owner: map[int64]string{}, firstPassed: map[int64]time.Time{}}
		w.fences[key] = f
	}
	return f
}

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
	key, what := leaseFence, ""
	if in.Shard != nil {
		if *in.Shard < 0 {
			http.Error(rw, "negative shard", http.StatusBadRequest)
			return
		}
		key, what = *in.Shard, fmt.Sprintf("shard %d: ", *in.Shard)
	}
	passed, err := time.Parse(time.RFC3339Nano, req.Header.Get(wire.GuardPassedHeader))
	if err != nil {
		w.v.add("%switness write from %s without a valid %s header: %v", what, in.Identity, wire.GuardPassedHeader, err)
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	passed = passed.Add(-w.offsetOf(in.Identity))
	// The Lease and the group as last observed, read before the write
	// counts as received: whatever they show happened before this write
	// arrived.
	lease, seenLease := w.rec.current(w.lease)
	group, groupSeen, seenGroup := w.rec.currentGroup()
	now := time.Now()

	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.fence(key)
	r := record{Write: in, received: now, passed: passed, accepted: in.Token >= f.newest}
	if !r.accepted {
		successor, succeeded := f.successorFirstPassed(in.Token)
		r.late = succeeded && passed.Before(successor)
	}
	f.writes = append(f.writes, r)
	if owner, ok := f.owner[in.Token]; ok && owner != in.Identity {
		w.v.add("%stwo leaders: %s and %s both wrote with token %d", what, owner, in.Identity, in.Token)
	} else if !ok {
		f.owner[in.Token] = in.Identity
	}
	if !r.accepted {
		if !r.late {
			// The window of this term overlaps a newer one's: two leaders acted at once.
			successor, _ := f.successorFirstPassed(in.Token)
			w.v.add("%sstale write: %s wrote with token %d (seq %d), past its guard %s after a newer term's first write was, and arrived after %s's token %d was accepted",
				what, in.Identity, in.Token, in.Seq, passed.Sub(successor).Round(time.Millisecond), f.newestBy, f.newest)
		}
		http.Error(rw, fmt.Sprintf("token %d is older than %d", in.Token, f.newest), http.StatusConflict)
		return
	}
	if key == leaseFence && seenLease && lease.holder != in.Identity && int64(lease.transitions) > in.Token {
		w.v.add("accepted a stale token: %s wrote with token %d after the Lease was seen naming %q at term %d", in.Identity, in.Token, lease.holder, lease.transitions)
	}
	// A shard goes to another replica only once its owner has let it go
	// (or its member Lease ran out, after its renew deadline): a write that
	// got past its guard after the group was seen granting the shard on was
	// made by a replica that no longer owned it.
	if key != leaseFence && seenGroup && key < group.Count && passed.After(groupSeen) {
		if o := group.Owners[key]; o.Member != "" && o.Member != in.Identity && group.Tokens[key] > in.Token {
			w.v.add("%s%s wrote with token %d, past its guard %s after the group was seen granting the shard to %s with token %d",
				what, in.Identity, in.Token, passed.Sub(groupSeen).Round(time.Millisecond), o.Member, group.Tokens[key])
		}
	}
	f.newest, f.newestBy = in.Token, in.Identity
	if first, ok := f.firstPassed[in.Token]; !ok || passed.Before(first) {
		f.firstPassed[in.Token] = passed
	}
	rw.WriteHeader(http.StatusNoContent)
}

// successorFirstPassed returns the earliest moment a write of a term newer
// than token got past its guard, among the writes accepted so far.
func (f *fence) successorFirstPassed(token int64) (time.Time, bool) {
	var first time.Time
	for t, p := range f.firstPassed {
		if t > token && (first.IsZero() || p.Before(first)) {
			first = p
		}
	}
	return first, !first.IsZero()
}

// acceptedAfter returns identity's first write accepted after t by the
// fence of key (leaseFence, or a shard), whose token is at least token.
func (w *witness) acceptedAfter(key int, identity string, token int64, t time.Time) (record, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.fence(key).writes {
		if r.accepted && r.Identity == identity && r.Token >= token && !r.received.Before(t) {
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
	// maxGapKey is the fence of maxGap.
	maxGapKey int
}

// stats are the figures of the fences of keys taken together; the gap is
// the longest of any one fence.
func (w *witness) stats(keys ...int) witnessStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	var s witnessStats
	for _, key := range keys {
		f := w.fence(key)
		s.writes += len(f.writes)
		s.terms += len(f.owner)
		var last time.Time
		for _, r := range f.writes {
			if !r.accepted {
				s.refused++
				if r.late {
					s.late++
				}
				continue
			}
			if !last.IsZero() && r.received.Sub(last) > s.maxGap {
				s.maxGap, s.maxGapAt, s.maxGapKey = r.received.Sub(last), last, key
			}
			last = r.received
		}
	}
	return s
}

// identityStats are one writer's accepted writes and the terms they were
// made in.
type identityStats struct{ writes, terms int }

// byIdentity returns each writer's accepted writes and terms at the fences
// of keys.
func (w *witness) byIdentity(keys ...int) map[string]identityStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]identityStats{}
	for _, key := range keys {
		f := w.fence(key)
		for _, r := range f.writes {
			if !r.accepted {
				continue
			}
			s := out[r.Identity]
			s.writes++
			out[r.Identity] = s
		}
		for _, owner := range f.owner {
			s := out[owner]
			s.terms++
			out[owner] = s
		}
	}
	return out
}
