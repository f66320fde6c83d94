package nudge

import "testing"

func TestNilHookNeverNudges(t *testing.T) {
	var h Hook
	for p := range Points {
		if h.At(p) {
			t.Errorf("the nil Hook took %s", p)
		}
	}
}

func TestHookAnswers(t *testing.T) {
	asked := map[Point]int{}
	h := Hook(func(p Point) bool { asked[p]++; return p == PingDeferred })
	for p := range Points {
		if got, want := h.At(p), p == PingDeferred; got != want {
			t.Errorf("At(%s) = %v, want %v", p, got, want)
		}
	}
	if len(asked) != int(Points) {
		t.Errorf("the Hook was asked at %d points, want %d", len(asked), Points)
	}
}

func TestEveryPointIsNamed(t *testing.T) {
	seen := map[string]bool{}
	for p := range Points {
		n := p.String()
		if n == "" || n == "unknown" || seen[n] {
			t.Errorf("point %d is named %q", p, n)
		}
		seen[n] = true
	}
	if Points.String() != "unknown" {
		t.Errorf("Points is named %q", Points.String())
	}
}
