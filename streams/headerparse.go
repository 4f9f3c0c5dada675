package streams

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Parsers of the Reach-* headers a dispatcher reads from callers. Each
// returns the zero value when the header is absent and a BAD_REQUEST error
// naming the header and the value when it is malformed, so a bad header is
// refused before anything is delivered.

// MaxVisits bounds the instance ids Reach-Visits may list: far more than any
// loop protection needs, and small enough that a hostile header cannot make
// every task scan a huge list.
const MaxVisits = 256

// ParseCount returns the value of a header holding a non-negative integer
// (Reach-Hops, Reach-Timeout in ms, Reach-Attempt).
func ParseCount(h nats.Header, key string) (int64, *Error) {
	v := h.Get(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, NewError(CodeBadRequest, "header %s must be a non-negative integer, got %q", key, v)
	}
	return n, nil
}

// ParseDeadline returns Reach-Deadline, an absolute time in unix
// milliseconds; the zero time when absent.
func ParseDeadline(h nats.Header) (time.Time, *Error) {
	ms, err := ParseCount(h, HeaderDeadline)
	if err != nil || ms == 0 {
		return time.Time{}, err
	}
	if ms > maxUnixMilli {
		return time.Time{}, NewError(CodeBadRequest, "header %s must be unix milliseconds, got %d (after the year 9999)", HeaderDeadline, ms)
	}
	return time.UnixMilli(ms), nil
}

// maxUnixMilli is 9999-12-31T23:59:59.999Z.
const maxUnixMilli = 253402300799999

// ParseAmount parses a cost or a budget: a finite, non-negative decimal
// number such as "0.002" or "12" (Reach-Cost, Reach-Budget).
func ParseAmount(key, v string) (float64, *Error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) || strings.ContainsAny(v, "xXpP_") { // decimal only: no 0x1p-2, no 1_000
		return 0, NewError(CodeBadRequest, "header %s must be a non-negative number, got %q", key, v)
	}
	return f, nil
}

// ParseBudget returns Reach-Budget, 0 when absent (no budget).
func ParseBudget(h nats.Header) (float64, *Error) {
	v := h.Get(HeaderBudget)
	if v == "" {
		return 0, nil
	}
	return ParseAmount(HeaderBudget, v)
}

// ParseCost returns the Reach-Cost an agent reported, 0 when absent. A
// malformed cost is an error; a dispatcher counts it as 0 rather than fail
// the task it came with.
func ParseCost(h nats.Header) (float64, *Error) {
	v := h.Get(HeaderCost)
	if v == "" {
		return 0, nil
	}
	return ParseAmount(HeaderCost, v)
}

// ParseVisits returns the instance ids of Reach-Visits, a comma-separated
// list (at most MaxVisits, each a valid instance id); nil when absent.
func ParseVisits(h nats.Header) ([]string, *Error) {
	v := h.Get(HeaderVisits)
	if v == "" {
		return nil, nil
	}
	if n := strings.Count(v, ",") + 1; n > MaxVisits {
		return nil, NewError(CodeBadRequest, "header %s lists %d instances, more than %d", HeaderVisits, n, MaxVisits)
	}
	ids := strings.Split(v, ",")
	for _, id := range ids {
		if err := ValidateInstanceID(id); err != nil {
			return nil, NewError(CodeBadRequest, "header %s: %v", HeaderVisits, err)
		}
	}
	return ids, nil
}
