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
)

// TestChecksCatchViolations feeds the witness and the recorder histories
// that break each invariant, so that a chaos run that reports none is known
// to be able to report them.
func TestChecksCatchViolations(t *testing.T) {
	v := &violations{start: time.Now(), logf: t.Logf}
	rec := newRecorder(v, "l")
	w := newWitness(rec, "l", v)
	defer w.Close()
	lease := func(rv, holder string, transitions int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: rv},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(transitions)},
		}
	}
	post := func(identity string, token int32) int {
		t.Helper()
		body, _ := json.Marshal(witnessWrite{Identity: identity, Token: token})
		resp, err := http.Post(w.URL(), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
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
	rec.observeLease(lease("2", "b", 3))
	expect("b leads", post("b", 4), http.StatusNoContent, "")
	expect("a writes after b", post("a", 2), http.StatusConflict, "stale write")
	expect("c reuses b's token", post("c", 4), http.StatusNoContent, "two leaders")
	rec.observeLease(lease("3", "c", 5))
	expect("b writes after c was named", post("b", 4), http.StatusNoContent, "accepted a stale token")
	rec.observeLease(lease("4", "a", 5))
	expect("holder change, same term", 0, 0, "leaseTransitions stayed 5")
	rec.observeLease(lease("5", "a", 4))
	expect("term goes back", 0, 0, "went back")
	rec.observeLease(lease("5", "a", 4))
	expect("relist of the same version", 0, 0, "")
}
