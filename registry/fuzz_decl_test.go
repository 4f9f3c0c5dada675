package registry_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agent-reach/agentreach/registry"
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
		d, err := registry.ParseDeclaration(data)
		if err != nil {
			if !errors.Is(err, registry.ErrInvalidDeclaration) {
				t.Fatalf("error without ErrInvalidDeclaration: %v", err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("accepted, then invalid: %v", err)
		}
		roundTrip(t, d, func(b []byte) (any, error) { return registry.ParseDeclaration(b) })
	})
}

func FuzzParseRequirement(f *testing.F) {
	for _, seed := range []string{`{}`, `{"labels":{"engine":"postgres"},"limits":{"history_days":90},
		"permissions":["write","read"],"max_latency_ms":500,"max_cost":0.01}`, `{"max_latency_ms":0.5,"max_cost":0}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := registry.ParseRequirement(data)
		if err != nil {
			if !errors.Is(err, registry.ErrInvalidRequirement) {
				t.Fatalf("error without ErrInvalidRequirement: %v", err)
			}
			return
		}
		again, err := registry.ParseRequirement([]byte(r.Key()))
		if r.Empty() {
			again, err = registry.ParseRequirement([]byte(`{}`))
		}
		if err != nil || again.Key() != r.Key() {
			t.Fatalf("key %s reads back as %s, %v", r.Key(), again.Key(), err)
		}
		roundTrip(t, r, func(b []byte) (any, error) { return registry.ParseRequirement(b) })
	})
}

func FuzzParsePolicy(f *testing.F) {
	for _, seed := range []struct{ key, value string }{
		{"defaults", `{"strategy":"hash","retries":-1,"ack_timeout":"500ms","breaker":{"failure_ratio":0.5,"window":"1m"}}`},
		{"capability.orders.query", "queue_wait: -1s\nrequire: {labels: {engine: postgres}, max_cost: 0.01}\n"},
		{"acl", `{"rules":[{"caller":"billing-*","may_call":["payment.*"]}]}`},
		{"workflow.claim.review", "name: claim.review\nsteps: [{name: verify, call: claim.verify}]\n"},
	} {
		f.Add(seed.key, []byte(seed.value))
	}
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		v, err := registry.ParsePolicy(key, data)
		if err != nil {
			if !errors.Is(err, registry.ErrInvalidPolicy) {
				t.Fatalf("error without ErrInvalidPolicy: %v", err)
			}
			return
		}
		again, err := registry.ParsePolicy(key, v.JSON)
		if err != nil || string(again.JSON) != string(v.JSON) {
			t.Fatalf("JSON form %s reads back as %s, %v", v.JSON, again.JSON, err)
		}
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
