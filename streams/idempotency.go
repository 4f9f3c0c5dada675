package streams

import (
	"crypto/sha256"
	"encoding/hex"
)

// IdempotencyNoCaller is the caller token of the bucket key of a delivery
// without Reach-Source (auth off): "=" is a valid KV key token but no
// identity's name (names hold only letters, digits, '_' and '-'), so no
// caller shares it.
const IdempotencyNoCaller = "="

// IdempotencyKey returns the REACH_IDEMPOTENCY key under which an agent
// claims and stores the outcome of caller's idempotency key for one
// capability: "<capability>.<caller>.<key>", so that the same key from two
// callers is two executions. caller is the delivery's Reach-Source (the
// dispatcher proves it where auth is on), IdempotencyNoCaller when there is
// none. A caller or key that is not 1–128 characters of [-_=a-zA-Z0-9]
// (what a KV key token may hold) is replaced by "sha256-" and the hex of
// the first 16 bytes of its SHA-256, so every language derives the same
// bucket key (docs/protocol.md, Idempotency).
func IdempotencyKey(capability, caller, key string) string {
	if caller == "" {
		caller = IdempotencyNoCaller
	}
	return capability + "." + kvToken(caller) + "." + kvToken(key)
}

// kvToken returns s when it is a valid KV key token, else its hash.
func kvToken(s string) string {
	if validKVToken(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(sum[:16])
}

func validKVToken(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '=':
		default:
			return false
		}
	}
	return true
}
