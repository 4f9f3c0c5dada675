package streams

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// NATS headers are case-sensitive: nats.Header.Get finds a header only
// under its exact name, so a message can carry "Reach-Source" beside
// "reach-source" or "REACH-SOURCE", or Reach-Source twice, and two readers
// (a Go dispatcher and an agent whose client folds case, or takes the
// last value) would see two different callers. Dispatchers therefore
// decide on one value before anything reads it: with auth on a security
// header that is not there exactly once under its own spelling is refused
// (CheckOnce), and without auth the header is reduced to the value Get
// reads (KeepOne).

// spellings returns how many values h carries for header name under every
// spelling, and the first key that spells name in another case ("" when
// none).
func spellings(h nats.Header, name string) (values int, other string) {
	for k, v := range h {
		if len(k) != len(name) || !strings.EqualFold(k, name) {
			continue
		}
		values += len(v)
		if k != name && (other == "" || k < other) {
			other = k
		}
	}
	return values, other
}

// CheckOnce returns an error unless h carries header name at most once
// and only under its own spelling: no other case of it, no second value.
// The error names the rule.
func CheckOnce(h nats.Header, name string) error {
	switch n, other := spellings(h, name); {
	case other != "":
		return fmt.Errorf("the header %q spells %s in another case: a security header is accepted only once, spelt %s", other, name, name)
	case n > 1:
		return fmt.Errorf("%s appears %d times: a security header is accepted only once", name, n)
	}
	return nil
}

// KeepOne reduces header name in h to the one value h.Get(name) reads:
// every other spelling of it is removed, and every value but the first.
func KeepOne(h nats.Header, name string) {
	for k := range h {
		if k != name && len(k) == len(name) && strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
	if v := h[name]; len(v) > 1 {
		h[name] = v[:1]
	}
}
