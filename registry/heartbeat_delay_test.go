package registry

import (
	"testing"
	"time"
)

// A failed heartbeat put is retried after a delay drawn from the upper
// half of a twentieth of the interval, kept between 50 and 250 ms, however
// many puts failed before: no backoff, so a put lands within a fraction of
// a second of the store answering again.
func TestHeartbeatRetryDelayBounds(t *testing.T) {
	for _, c := range []struct {
		interval, step time.Duration
	}{
		{5 * time.Second, 250 * time.Millisecond},
		{30 * time.Second, 250 * time.Millisecond},
		{2 * time.Second, 100 * time.Millisecond},
		{time.Second, 50 * time.Millisecond},
		{20 * time.Millisecond, 50 * time.Millisecond},
	} {
		h := &Heartbeat{interval: c.interval}
		for range 500 {
			if d := h.retryDelay(); d < c.step/2 || d >= c.step {
				t.Fatalf("interval %v: delay %v outside [%v, %v)", c.interval, d, c.step/2, c.step)
			}
		}
	}
}

// A put is bounded to a fifth of the interval, between 250 ms and 1 s.
func TestHeartbeatPutTimeoutBounds(t *testing.T) {
	for _, c := range []struct{ interval, want time.Duration }{
		{30 * time.Second, time.Second},
		{5 * time.Second, time.Second},
		{2 * time.Second, 400 * time.Millisecond},
		{200 * time.Millisecond, 250 * time.Millisecond},
	} {
		h := &Heartbeat{interval: c.interval}
		if got := h.putTimeout(); got != c.want {
			t.Errorf("interval %v: put timeout %v, want %v", c.interval, got, c.want)
		}
	}
}
