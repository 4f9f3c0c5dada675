package engine

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Properties of the retry rule and the backoff bound.
func TestRetryRuleProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		kind := Outcome(rapid.IntRange(int(OutcomeDone), int(OutcomeUnreachable)).Draw(rt, "kind"))
		retries := rapid.IntRange(0, 5).Draw(rt, "retries")
		attempts := rapid.IntRange(1, 10).Draw(rt, "attempts")
		budget := rapid.Float64Range(0, 10).Draw(rt, "budget")
		spent := rapid.Float64Range(0, 10).Draw(rt, "spent")
		got := mayRetry(kind, attempts, retries, spent, budget)
		switch {
		case kind == OutcomeDone || kind == OutcomeFinal:
			if got {
				rt.Fatalf("retried a %v outcome (BIZ_REJECT, BAD_REQUEST and the like never are)", kind)
			}
		case attempts > retries:
			if got {
				rt.Fatalf("delivery %d retried with only %d retries", attempts+1, retries)
			}
		case budget > 0 && spent >= budget:
			if got {
				rt.Fatalf("retried with the budget %v spent (%v)", budget, spent)
			}
		default:
			if !got {
				rt.Fatalf("did not retry a retryable %v outcome at attempt %d of %d", kind, attempts, retries+1)
			}
		}
	})
}

func TestBackoffCeilingProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		base := time.Duration(rapid.IntRange(1, 1000).Draw(rt, "base_ms")) * time.Millisecond
		limit := base * time.Duration(rapid.IntRange(1, 100).Draw(rt, "limit_x"))
		remaining := time.Duration(rapid.Int64Range(0, int64(time.Minute)).Draw(rt, "remaining"))
		attempts := rapid.IntRange(1, 40).Draw(rt, "attempts")
		c := backoffCeiling(base, limit, attempts, remaining)
		if c > limit || c > remaining/4 {
			rt.Fatalf("ceiling %v exceeds the limit %v or a quarter of %v", c, limit, remaining)
		}
		if next := backoffCeiling(base, limit, attempts+1, remaining); next < c {
			rt.Fatalf("ceiling shrank from %v to %v as attempts grew", c, next)
		}
		if remaining/4 >= limit && attempts == 1 && c != base {
			rt.Fatalf("the first retry waits up to base (%v), got %v", base, c)
		}
	})
}
