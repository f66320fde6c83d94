package chaos

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	wire "github.com/cle-dev/cle/internal/witness"
)

// TestChecksCatchViolations feeds the witness and the recorder histories
// that break each invariant, so that a chaos run that reports none is known
// to be able to report them.
func TestChecksCatchViolations(t *testing.T) {
	v := &violations{start: time.Now(), logf: t.Logf}
	rec := newRecorder(v, "l")
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
	postPassed := func(identity string, token int32, passed time.Time) int {
		t.Helper()
		body, _ := json.Marshal(wire.Write{Identity: identity, Token: token})
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
	post := func(identity string, token int32) int { return postPassed(identity, token, time.Now()) }
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
	expect("a's held write arrives", postPassed("a", 2, heldSince), http.StatusConflict, "")
	expect("a writes after b", post("a", 2), http.StatusConflict, "stale write")
	expect("a write without its guard's stamp", postPassed("a", 2, time.Time{}), http.StatusBadRequest, "without a valid")
	expect("c reuses b's token", post("c", 4), http.StatusNoContent, "two leaders")
	rec.observeLease(lease("3", "c", 5))
	expect("b writes after c was named", post("b", 4), http.StatusNoContent, "accepted a stale token")
	rec.observeLease(lease("4", "a", 5))
	expect("holder change, same term", 0, 0, "leaseTransitions stayed 5")
	rec.observeLease(lease("5", "a", 4))
	expect("term goes back", 0, 0, "went back")
	rec.observeLease(lease("5", "a", 4))
	expect("relist of the same version", 0, 0, "")
	if s := w.stats(); s.refused != 2 || s.late != 1 {
		t.Errorf("witness stats: %d refused, %d of them late; want 2, 1", s.refused, s.late)
	}
}
