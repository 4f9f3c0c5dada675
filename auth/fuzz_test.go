package auth

import (
	"errors"
	"testing"

	"github.com/agent-reach/agentreach/registry/policy"
)

// FuzzDirectoryEntry reads identity.<name> values as a dispatcher does
// (anyone with a dispatcher identity can write REACH_POLICY): an entry is
// refused with policy.ErrInvalid or is one whose grant is valid, whose JSON
// form reads back the same, and which grants nothing unless it is an
// agent's.
func FuzzDirectoryEntry(f *testing.F) {
	const pub = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	for _, seed := range []struct{ name, value string }{
		{"math-1", `{"role":"agent","type":"math","public_key":"` + pub + `"}`},
		{"risk-1", `{"role":"agent","type":"risk","serves":["risk.*","fraud.>"],"public_key":"` + pub + `"}`},
		{"web", `{"role":"caller","public_key":"` + pub + `","revoked":"2026-01-02T03:04:05Z"}`},
		{"risk-1", `{"role":"agent","type":"risk","serves":["risk.>.x"],"public_key":"` + pub + `"}`},
		{"d1", `{"role":"dispatcher","serves":["x"],"public_key":"` + pub + `"}`},
	} {
		f.Add(seed.name, []byte(seed.value))
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		v, err := policy.Parse(PolicyIdentityPrefix+name, data)
		if err != nil {
			if !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("error without policy.ErrInvalid: %v", err)
			}
			return
		}
		e, ok := v.Decoded.(*DirectoryEntry)
		if !ok {
			t.Fatalf("decoded as %T", v.Decoded)
		}
		if err := ValidateServes(e.Serves); err != nil {
			t.Fatalf("accepted an entry with a bad grant %q: %v", e.Serves, err)
		}
		if g := e.Grant(); (e.Role == RoleAgent) != (len(g) > 0) {
			t.Fatalf("role %s has grant %q", e.Role, g)
		}
		again, err := policy.Parse(PolicyIdentityPrefix+name, v.JSON)
		if err != nil || string(again.JSON) != string(v.JSON) {
			t.Fatalf("JSON form %s reads back as %v, %v", v.JSON, again, err)
		}
	})
}
