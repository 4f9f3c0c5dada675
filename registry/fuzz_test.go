package registry_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/agent-reach/agentreach/registry"
)

// FuzzDecodeRecord reads what any agent, in any language, put in
// REACH_AGENTS: DecodeRecord never panics, what it refuses wraps
// ErrInvalidRecord, and what it accepts validates, is normalized and
// survives a JSON round trip unchanged.
func FuzzDecodeRecord(f *testing.F) {
	for _, seed := range []string{
		// docs/protocol.md's example record.
		`{"id": "echo-1", "type": "echo", "capabilities": ["echo"], "max_concurrent": 8,
		  "weight": 100, "active": 0, "status": "ready", "timeout_hint_ms": 0,
		  "heartbeat_ms": 5000, "version": "1.0.0"}`,
		`{"id":"r-2","type":"risk","capabilities":["risk.credit","risk.fraud"],"max_concurrent":1,"load_index":0.5,
		  "status":"draining","heartbeat_ms":100,"deps":{"ext.orders-db":"down"},"unknown":[1,{"x":null}]}`,
		`{"id":"a","type":"a","capabilities":["a"],"max_concurrent":1,"heartbeat_ms":100,"weight":10000,"load_index":-0}`,
		`{"ID":"a","TYPE":"a","Capabilities":["a"],"max_concurrent":1,"heartbeat_ms":100,"id":"b"}`,
		`{"id":"a","type":"a","capabilities":["a","a"],"max_concurrent":1,"heartbeat_ms":100}`,
		`{"id":"a.b","type":"a","capabilities":["a"],"max_concurrent":1,"heartbeat_ms":100}`,
		`{"id":"a","type":"a","capabilities":["A"],"max_concurrent":1,"heartbeat_ms":100}`,
		`{"id":"a","type":"a","capabilities":["a"],"max_concurrent":0,"heartbeat_ms":100}`,
		`{"id":"a","type":"a","capabilities":["a"],"max_concurrent":1,"heartbeat_ms":99}`,
		`{"id":"a","type":"a","capabilities":["a"],"max_concurrent":1,"heartbeat_ms":100,"load_index":1.5}`,
		`{"id":"a","type":"a","capabilities":["a"],"max_concurrent":1e3,"heartbeat_ms":100}`,
		`{"id":"a","type":"a","capabilities":["a"],"max_concurrent":1.5,"heartbeat_ms":100}`,
		`{"id":"a","type":"a","capabilities":["a"],"max_concurrent":1,"heartbeat_ms":100,"status":"gone","version":"\xff"}`,
		`{"id":"a","type":"a","capabilities":null,"max_concurrent":1,"heartbeat_ms":100}`,
		`{"id":"a","type":"a","capabilities":["a"],"max_concurrent":99999999999999999999,"heartbeat_ms":100}`,
		`null`, `[]`, `{}`, `{"id":`, ``, `{"id":"a"} trailing`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := registry.DecodeRecord(data)
		if err != nil {
			if !errors.Is(err, registry.ErrInvalidRecord) {
				t.Fatalf("%q: %v, want ErrInvalidRecord", data, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("%q accepted as %+v, which does not validate: %v", data, r, err)
		}
		normalized := r
		normalized.Normalize()
		if !reflect.DeepEqual(normalized, r) {
			t.Fatalf("%q accepted as %+v, not normalized", data, r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%q accepted as %+v, which does not encode: %v", data, r, err)
		}
		again, err := registry.DecodeRecord(b)
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%q accepted as %+v; its JSON %s reads back as %+v, %v", data, r, b, again, err)
		}
	})
}
