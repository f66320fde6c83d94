package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	wire "github.com/cle-dev/cle/internal/witness"
	"github.com/cle-dev/cle/pkg/shard"
)

// TestChecksCatchViolations feeds the witness and the recorder histories
// that break each invariant, so that a chaos run that reports none is known
// to be able to report them.
func TestChecksCatchViolations(t *testing.T) {
	v := &violations{start: time.Now(), logf: t.Logf}
	rec := newRecorder(v, "l", "g")
	// a's clock is ten minutes ahead: the witness judges a write by the
	// machine's time it got past the guard.
	offsets := map[string]time.Duration{"a": 10 * time.Minute}
	w := newWitness(rec, "l", v, func(id string) time.Duration { return offsets[id] })
	defer w.Close()
	lease := func(rv, holder string, transitions int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: rv},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(transitions)},
		}
	}
	// postPassed writes as identity, past its guard at passed (machine time).
	postPassed := func(identity string, shard *int, token int64, passed time.Time) int {
		t.Helper()
		body, _ := json.Marshal(wire.Write{Identity: identity, Shard: shard, Token: token})
		req, err := http.NewRequest(http.MethodPost, w.URL(), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if !passed.IsZero() {
			req.Header.Set(wire.GuardPassedHeader, passed.Add(offsets[identity]).Format(time.RFC3339Nano))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	post := func(identity string, token int64) int { return postPassed(identity, nil, token, time.Now()) }
	expect := func(step string, code, wantCode int, want string) {
		t.Helper()
		got := v.all()
		v.mu.Lock()
		v.list, v.closed = nil, false
		v.mu.Unlock()
		if code != wantCode {
			t.Errorf("%s: witness answered %d, want %d", step, code, wantCode)
		}
		switch {
		case want == "" && len(got) > 0:
			t.Errorf("%s: unexpected violations %q", step, got)
		case want != "" && (len(got) != 1 || !strings.Contains(got[0], want)):
			t.Errorf("%s: violations %q, want one containing %q", step, got, want)
		}
	}

	rec.observeLease(lease("1", "a", 1))
	expect("a leads", post("a", 2), http.StatusNoContent, "")
	heldSince := time.Now() // a write of a's past the guard, held in a frozen a
	rec.observeLease(lease("2", "b", 3))
	expect("b leads", post("b", 4), http.StatusNoContent, "")
	expect("a's held write arrives", postPassed("a", nil, 2, heldSince), http.StatusConflict, "")
	expect("a writes after b", post("a", 2), http.StatusConflict, "stale write")
	expect("a write without its guard's stamp", postPassed("a", nil, 2, time.Time{}), http.StatusBadRequest, "without a valid")
	expect("c reuses b's token", post("c", 4), http.StatusNoContent, "two leaders")
	rec.observeLease(lease("3", "c", 5))
	expect("b writes after c was named", post("b", 4), http.StatusNoContent, "accepted a stale token")
	rec.observeLease(lease("4", "a", 5))
	expect("holder change, same term", 0, 0, "leaseTransitions stayed 5")
	rec.observeLease(lease("5", "a", 4))
	expect("term goes back", 0, 0, "went back")
	rec.observeLease(lease("5", "a", 4))
	expect("relist of the same version", 0, 0, "")
	if s := w.stats(leaseFence); s.refused != 2 || s.late != 1 {
		t.Errorf("witness stats: %d refused, %d of them late; want 2, 1", s.refused, s.late)
	}

	// The group's shards are fenced one by one.
	version := 0
	group := func(tokens []int64, owners ...shard.Owner) {
		t.Helper()
		annotations, err := shard.Group{Generation: int64(version + 1), Count: len(owners), Owners: owners, Tokens: tokens}.Annotations()
		if err != nil {
			t.Fatal(err)
		}
		version++
		rec.observeLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "g", ResourceVersion: fmt.Sprint(100 + version), Annotations: annotations}})
	}
	postShard := func(identity string, s int, token int64) int { return postPassed(identity, &s, token, time.Now()) }
	x1, y1, x2 := shard.Owner{Member: "x", Epoch: 1}, shard.Owner{Member: "y", Epoch: 1}, shard.Owner{Member: "x", Epoch: 2}
	group([]int64{1, 1}, x1, y1)
	expect("x acts on shard 0", postShard("x", 0, 1), http.StatusNoContent, "")
	expect("y acts on shard 1", postShard("y", 1, 1), http.StatusNoContent, "")
	expect("y writes shard 0 with x's token", postShard("y", 0, 1), http.StatusNoContent, "shard 0: two leaders")
	shardHeld := time.Now()
	group([]int64{1, 2}, x1, x1)
	expect("y's held write to shard 1 arrives", postPassed("y", intPtr(1), 1, shardHeld), http.StatusNoContent, "")
	expect("y writes shard 1 after it was seen granted to x", postShard("y", 1, 1), http.StatusNoContent, "after the group was seen granting the shard to x")
	expect("x acts on shard 1", postShard("x", 1, 2), http.StatusNoContent, "")
	expect("y writes shard 1 after x did", postShard("y", 1, 1), http.StatusConflict, "shard 1: stale write")
	group([]int64{1, 2}, x2, x1)
	expect("shard 0 granted to a new epoch without a new token", 0, 0, "shard 0 granted to x@2 with token 1")
	group([]int64{1, 1}, x2, x1)
	expect("shard 1's token goes back", 0, 0, "shard 1's token went back")
	if s := w.stats(groupKeysOf(2)...); s.writes != 7 || s.refused != 1 || s.terms != 3 {
		t.Errorf("group witness stats: %d writes, %d refused, %d grants; want 7, 1, 3", s.writes, s.refused, s.terms)
	}
}

func intPtr(i int) *int { return &i }
