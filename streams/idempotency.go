package streams

import (
	"crypto/sha256"
	"encoding/hex"
)

// IdempotencyKey returns the REACH_IDEMPOTENCY key under which an agent
// claims and stores the outcome of a caller's idempotency key for one
// capability: "<capability>.<key>". A key that is not 1–128 characters of
// [-_=a-zA-Z0-9] (what a KV key token may hold) is replaced by
// "sha256-" and the hex of the first 16 bytes of its SHA-256, so every
// language derives the same bucket key (docs/protocol.md, Idempotency).
func IdempotencyKey(capability, key string) string {
	if !validKVToken(key) {
		sum := sha256.Sum256([]byte(key))
		key = "sha256-" + hex.EncodeToString(sum[:16])
	}
	return capability + "." + key
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
