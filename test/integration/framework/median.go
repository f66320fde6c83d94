package framework

import (
	"slices"
	"time"
)

// Median is the median of ds (the mean of the two middle ones for an even
// count), to the millisecond; 0 for none.
func Median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2].Round(time.Millisecond)
	}
	return ((s[len(s)/2-1] + s[len(s)/2]) / 2).Round(time.Millisecond)
}
