package streams

import (
	"encoding/hex"
	"math/rand/v2"
)

// NewRequestID returns a fresh request id: a UUID v4 (RFC 9562 layout) drawn
// from the runtime's fast per-thread generator rather than crypto/rand, since
// ids must be unique, not secret, and one is made for every task.
func NewRequestID() string {
	var b [16]byte
	hi, lo := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b[i], b[8+i] = byte(hi>>(8*i)), byte(lo>>(8*i))
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // variant 10
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}
