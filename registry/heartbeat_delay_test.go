package registry

import (
	"testing"
	"time"
)

// A failed heartbeat put is retried with backoff that starts at a
// twentieth of the interval, doubles, and stops at half an interval or one
// second, whichever is less; every delay is drawn from the upper half of
// its step.
func TestHeartbeatRetryDelayBounds(t *testing.T) {
	for _, c := range []struct {
		interval, first, limit time.Duration
	}{
		{5 * time.Second, 250 * time.Millisecond, time.Second},
		{30 * time.Second, time.Second, time.Second},
		{time.Second, 50 * time.Millisecond, 500 * time.Millisecond},
		{200 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond},
		{20 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		h := &Heartbeat{interval: c.interval}
		step := c.first
		for n := 1; n <= 12; n++ {
			for range 50 {
				d := h.retryDelay(n)
				if d < step/2 || d >= step {
					t.Fatalf("interval %v, failure %d: delay %v outside [%v, %v)", c.interval, n, d, step/2, step)
				}
			}
			step = min(2*step, c.limit)
		}
	}
}
