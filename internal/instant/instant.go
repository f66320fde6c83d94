// Package instant makes instants with a wall-clock and a monotonic reading
// that differ as they do on a real machine after a clock step or a suspend,
// for tests and the simulation: time.Now gives both readings, but package
// time makes no other instant with a monotonic one.
//
// Code that measures elapsed time for a deadline or a wait (internal/lead's
// Elapsed, a clock's Since) must read the right one of the two, and a
// test clock that gives wall readings alone cannot show which it reads.
package instant

import (
	"time"
	"unsafe"
)

// origin is an instant with a monotonic reading, from which At derives its
// own (UTC and In strip it).
var origin = time.Now()

// layout is time.Time's: when the top bit of wall is set, ext is the
// monotonic reading in nanoseconds.
type layout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const hasMonotonic = 1 << 63

// At is an instant whose wall-clock reading is wall (with its location) and
// whose monotonic reading is mono (printed as m=+mono by String):
// Sub, Before, After and Equal of two such instants compare their monotonic
// readings, and Round(0) strips it, as for time.Now's. The wall reading must
// lie between the years 1885 and 2157, as time.Now's does.
func At(wall time.Time, mono time.Duration) time.Time {
	t := origin.Add(wall.Sub(origin.Round(0)))
	l := (*layout)(unsafe.Pointer(&t))
	if l.wall&hasMonotonic == 0 {
		panic("instant.At: wall reading " + wall.String() + " cannot have a monotonic reading")
	}
	l.ext = int64(mono)
	l.loc = (*layout)(unsafe.Pointer(&wall)).loc
	return t
}
