package lead

import "time"

// Elapsed is the time from t to now for a deadline: the longer of the
// monotonic and the wall-clock readings. The monotonic clock does not
// advance while the machine is suspended, but the rest of the world does, so
// a process that wakes from a suspend must see the whole gap; and a wall
// clock set back must not give a term more time. A wait (how long to hold
// off before acting) compares instants with their monotonic readings alone
// (time.Time's Sub and Before), so that neither a suspend nor a wall-clock
// step cuts it short.
func Elapsed(now, t time.Time) time.Duration {
	return max(now.Sub(t), now.Round(0).Sub(t.Round(0)))
}
