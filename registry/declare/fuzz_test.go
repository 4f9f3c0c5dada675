package declare_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agent-reach/agentreach/registry/declare"
)

// The parsers of documents people write never panic, refuse with their
// sentinel, and what they accept validates and reads back to itself from
// its JSON form.

func FuzzParseDeclaration(f *testing.F) {
	for _, seed := range []string{ordersReader, ordersReaderYAML,
		`{"type":"a","capabilities":[{"name":"x","input_schema":{"$defs":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/$defs/n"}}}}]}`,
		"type: a\ncapabilities:\n  - &c {name: x, cost: 0}\n  - <<: *c\n    name: y\nlabels: {k: [no, '1']}\n",
		`{"type":"a","capabilities":[{"name":"x"}],"limits":{"n":1e308},"tags":["<b>&"]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := declare.ParseDeclaration(data)
		if err != nil {
			if !errors.Is(err, declare.ErrInvalidDeclaration) {
				t.Fatalf("error without ErrInvalidDeclaration: %v", err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("accepted, then invalid: %v", err)
		}
		roundTrip(t, d, func(b []byte) (any, error) { return declare.ParseDeclaration(b) })
	})
}

func FuzzParseRequirement(f *testing.F) {
	for _, seed := range []string{`{}`, `{"labels":{"engine":"postgres"},"limits":{"history_days":90},
		"permissions":["write","read"],"max_latency_ms":500,"max_cost":0.01}`, `{"max_latency_ms":0.5,"max_cost":0}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := declare.ParseRequirement(data)
		if err != nil {
			if !errors.Is(err, declare.ErrInvalidRequirement) {
				t.Fatalf("error without ErrInvalidRequirement: %v", err)
			}
			return
		}
		again, err := declare.ParseRequirement([]byte(r.Key()))
		if r.Empty() {
			again, err = declare.ParseRequirement([]byte(`{}`))
		}
		if err != nil || again.Key() != r.Key() {
			t.Fatalf("key %s reads back as %s, %v", r.Key(), again.Key(), err)
		}
		roundTrip(t, r, func(b []byte) (any, error) { return declare.ParseRequirement(b) })
	})
}

// roundTrip checks that v's JSON form parses back to a value with the same
// JSON form.
func roundTrip(t *testing.T, v any, parse func([]byte) (any, error)) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted value does not marshal: %v", err)
	}
	again, err := parse(b)
	if err != nil {
		t.Fatalf("JSON form %s is refused: %v", b, err)
	}
	b2, _ := json.Marshal(again)
	if string(b) != string(b2) {
		t.Fatalf("JSON form changes on the way back:\n%s\n%s", b, b2)
	}
}
