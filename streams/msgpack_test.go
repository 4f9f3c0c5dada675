package streams_test

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/agent-reach/agentreach/streams"
)

// A msgpack body costs what it holds, not what its headers claim: lengths
// it does not hold, and nesting deeper than JSON may, are refused before
// anything is allocated for them, however often they come.
func TestMalformedMsgpackCostsWhatItHolds(t *testing.T) {
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"4 GiB of binary", []byte{0xc6, 0xff, 0xff, 0xff, 0xff}},
		{"a string of 4 GiB", []byte{0xdb, 0xff, 0xff, 0xff, 0xff}},
		{"an extension of 4 GiB", []byte{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"an array of 2^32 values", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"a map of 2^32 entries", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}},
		{"arrays nested a million deep", bytes.Repeat([]byte{0x91}, 1<<20)},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			if _, err := streams.PayloadType(header(streams.HeaderContentType, streams.ContentTypeMsgpack), c.body); err == nil {
				t.Fatalf("%s: accepted", c.name)
			}
			var v any
			if err := streams.Decode(streams.ContentTypeMsgpack, c.body, &v); err == nil {
				t.Fatalf("%s: decoded", c.name)
			}
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 100*uint64(len(c.body))+1<<20 {
			t.Errorf("%s (%d bytes), checked and decoded 100 times: %d bytes allocated", c.name, len(c.body), n)
		}
	}
}
