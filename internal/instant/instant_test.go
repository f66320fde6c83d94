package instant

import (
	"testing"
	"time"
)

func TestAt(t *testing.T) {
	wall := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a := At(wall, time.Minute)
	b := At(wall.Add(-time.Hour), 2*time.Minute) // the wall clock set back an hour
	if got := b.Sub(a); got != time.Minute {
		t.Errorf("Sub = %s, want the monotonic readings' difference 1m0s", got)
	}
	if !b.After(a) || a.Equal(At(wall, 2*time.Minute)) {
		t.Error("After and Equal compare the wall readings, want the monotonic ones")
	}
	if got := b.Round(0).Sub(a.Round(0)); got != -time.Hour {
		t.Errorf("Sub of the wall readings = %s, want -1h0m0s", got)
	}
	if !a.Round(0).Equal(wall) || a.Location() != time.UTC {
		t.Errorf("wall reading %s, want %s", a.Round(0), wall)
	}
	if local := At(wall.In(time.FixedZone("x", 3600)), 0); local.Location().String() != "x" {
		t.Errorf("location %s, want the wall reading's", local.Location())
	}
}

func TestAtPrintsItsReadings(t *testing.T) {
	got := At(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), 90*time.Second).String()
	if want := "2030-01-01 00:00:00 +0000 UTC m=+90.000000000"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
