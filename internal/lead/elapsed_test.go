package lead

import (
	"testing"
	"time"

	"github.com/cle-dev/cle/internal/instant"
)

// TestElapsedReadsBothClocks: the time a deadline counts since an instant is
// the longer of the monotonic and the wall-clock elapsed time, on instants
// that carry both readings as time.Now's do: a suspend (the monotonic clock
// stood still) and a wall clock set forward end a term; a wall clock set back
// does not prolong it.
func TestElapsedReadsBothClocks(t *testing.T) {
	wall := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	renewed := instant.At(wall, time.Hour)
	for name, tc := range map[string]struct {
		wall, mono time.Duration // elapsed on each clock
		want       time.Duration
	}{
		"steady":                   {wall: 3 * time.Second, mono: 3 * time.Second, want: 3 * time.Second},
		"a suspend":                {wall: 40 * time.Second, mono: time.Second, want: 40 * time.Second},
		"the wall clock set ahead": {wall: 5*time.Minute + time.Second, mono: time.Second, want: 5*time.Minute + time.Second},
		"the wall clock set back":  {wall: -5 * time.Minute, mono: 12 * time.Second, want: 12 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			now := instant.At(wall.Add(tc.wall), time.Hour+tc.mono)
			if got := Elapsed(now, renewed); got != tc.want {
				t.Errorf("Elapsed = %s, want %s", got, tc.want)
			}
		})
	}
}
