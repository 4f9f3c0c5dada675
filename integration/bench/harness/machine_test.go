package harness

import (
	"testing"
	"time"
)

// TestSteadinessCountsSlowStretches feeds steadinessOf a second of
// per-millisecond work with known slow stretches: one too short to count,
// one of 7 ms at the start, one of 20 ms at the very end.
func TestSteadinessCountsSlowStretches(t *testing.T) {
	work := make([]int, 1000)
	for i := range work {
		work[i] = 100
	}
	for i := range 7 {
		work[i] = 5 // slow: below a fifth of the median (100)
	}
	for i := 500; i < 503; i++ {
		work[i] = 10 // slow, but a stretch of 3 ms
	}
	work[600] = 20 // exactly a fifth: not slow
	for i := 980; i < 1000; i++ {
		work[i] = 0
	}
	got := steadinessOf(work)
	want := steadiness{slowShare: 30.0 / 1000, stretches: 2 * 10, longest: 20 * time.Millisecond}
	if got != want {
		t.Fatalf("steadinessOf = %+v, want %+v", got, want)
	}
	if got := steadinessOf(nil); got != (steadiness{}) {
		t.Fatalf("steadinessOf(nil) = %+v, want zero", got)
	}
}
