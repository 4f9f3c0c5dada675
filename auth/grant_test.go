package auth

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
)

// TestServesValidation checks what an agent's grant may hold: capability
// patterns as the ACL's may_call, each once, for agents only.
func TestServesValidation(t *testing.T) {
	agent := func(serves ...string) Identity {
		return Identity{Name: "risk-1", Role: RoleAgent, Type: "risk", Serves: serves}
	}
	for _, c := range []struct {
		id   Identity
		want string // "" for valid
	}{
		{agent(), ""},
		{agent("risk.*"), ""},
		{agent("risk.>", "fraud.score", "*.check"), ""},
		{agent(">"), ""},
		{agent(""), "serves[0]: empty"},
		{agent("Risk.*"), `serves[0]: "Risk.*": token "Risk"`},
		{agent("risk.>.x"), "'>' may only be the last token"},
		{agent("risk*"), "a wildcard must be a whole token"},
		{agent("risk.", "x"), `serves[0]: "risk."`},
		{agent("risk.*", "risk.*"), `serves[1]: "risk.*" is given twice`},
		{agent("risk credit"), `serves[0]`},
		{agent(slices.Repeat([]string{"a"}, MaxServes+1)...), "more than the 64 allowed"},
		{Identity{Name: "web", Role: RoleCaller, Serves: []string{"echo"}}, "only an agent serves capabilities"},
	} {
		err := c.id.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: refused: %v", c.id.Serves, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrInvalidIdentity) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: got %v, want an ErrInvalidIdentity saying %q", c.id.Serves, err, c.want)
		}
	}
	if g := agent().Grant(); !slices.Equal(g, []string{"risk", "risk.>"}) {
		t.Errorf("default grant %v", g)
	}
	for _, c := range []struct {
		grant []string
		cap   string
		want  bool
	}{
		{[]string{"risk.*"}, "risk.credit", true},
		{[]string{"risk.*"}, "risk.credit.x", false},
		{[]string{"risk.*"}, "risk", false},
		{[]string{"math", "math.>"}, "math.add", true},
		{[]string{"math", "math.>"}, "math", true},
		{[]string{"math", "math.>"}, "mathx.add", false},
		{[]string{"evil", "evil.>"}, "math.add", false},
	} {
		if got := Grants(c.grant, c.cap); got != c.want {
			t.Errorf("Grants(%v, %s) = %v, want %v", c.grant, c.cap, got, c.want)
		}
	}
}

// TestStoreServes checks that Add keeps an agent's grant, SetServes
// replaces it, and neither accepts a bad one, a caller's or a revoked
// agent's, leaving the store as it was.
func TestStoreServes(t *testing.T) {
	s, err := Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(Identity{Name: "risk-1", Role: RoleAgent, Type: "risk", Serves: []string{"risk.*", "fraud.score"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(Identity{Name: "bad-1", Role: RoleAgent, Type: "bad", Serves: []string{"bad.>.x"}}); !errors.Is(err, ErrInvalidIdentity) {
		t.Fatalf("a bad pattern: %v", err)
	}
	if _, ok := s.Identity("bad-1"); ok {
		t.Fatal("a refused identity was stored")
	}
	id, _ := s.Identity("risk-1")
	if !slices.Equal(id.Grant(), []string{"risk.*", "fraud.score"}) || entryOf(id).Serves == nil {
		t.Fatalf("stored grant %v, entry %+v", id.Grant(), entryOf(id))
	}
	rev := s.Revision()
	if _, err := s.SetServes("risk-1", []string{"Risk"}); !errors.Is(err, ErrInvalidIdentity) {
		t.Fatalf("SetServes with a bad pattern: %v", err)
	}
	if _, err := s.SetServes("nobody", []string{"x"}); !errors.Is(err, ErrUnknownIdentity) {
		t.Fatalf("SetServes of nobody: %v", err)
	}
	if _, err := s.Add(Identity{Name: "web", Role: RoleCaller}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetServes("web", []string{"x"}); !errors.Is(err, ErrInvalidIdentity) {
		t.Fatalf("SetServes of a caller: %v", err)
	}
	if s.Revision() != rev+1 {
		t.Fatalf("refused changes changed the store: revision %d, want %d", s.Revision(), rev+1)
	}
	if id, err = s.SetServes("risk-1", []string{"risk.>"}); err != nil || !slices.Equal(id.Grant(), []string{"risk.>"}) {
		t.Fatalf("SetServes: %+v, %v", id, err)
	}
	if id, err = s.SetServes("risk-1", nil); err != nil || !slices.Equal(id.Grant(), []string{"risk", "risk.>"}) {
		t.Fatalf("SetServes back to the default: %+v, %v", id, err)
	}
	if _, err := s.Revoke("risk-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetServes("risk-1", []string{"risk.*"}); !errors.Is(err, ErrInvalidIdentity) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("SetServes of a revoked agent: %v", err)
	}
}

// TestDirectoryEntryServes checks that an identity.<name> entry carries
// the grant and refuses a bad one.
func TestDirectoryEntryServes(t *testing.T) {
	_, pub := newUser(t)
	for _, c := range []struct {
		key, value string
		want       string // "" for valid
		grant      []string
	}{
		{"identity.risk-1", `{"role":"agent","type":"risk","serves":["risk.*","fraud.score"],"public_key":"` + pub + `"}`, "", []string{"risk.*", "fraud.score"}},
		{"identity.math-1", `{"role":"agent","type":"math","public_key":"` + pub + `"}`, "", []string{"math", "math.>"}},
		{"identity.web", `{"role":"caller","public_key":"` + pub + `"}`, "", nil},
		{"identity.risk-1", `{"role":"agent","type":"risk","serves":["risk.>.x"],"public_key":"` + pub + `"}`, "serves[0]", nil},
		{"identity.risk-1", `{"role":"agent","type":"risk","serves":"risk.*","public_key":"` + pub + `"}`, "cannot unmarshal", nil},
		{"identity.risk-1", `{"role":"agent","type":"risk","serves":["risk.*","risk.*"],"public_key":"` + pub + `"}`, "given twice", nil},
		{"identity.web", `{"role":"caller","serves":["echo"],"public_key":"` + pub + `"}`, "only an agent serves", nil},
	} {
		v, err := policy.Parse(c.key, []byte(c.value))
		if c.want != "" {
			if err == nil || !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: got %v, want a policy.ErrInvalid saying %q", c.value, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: refused: %v", c.value, err)
			continue
		}
		if g := v.Decoded.(*DirectoryEntry).Grant(); !slices.Equal(g, c.grant) {
			t.Errorf("%s: grant %v, want %v", c.value, g, c.grant)
		}
	}
}

// TestCheckRecord checks which agent records the authorizer lets a
// dispatcher route, against a real directory, and that each refused
// instance is logged once however often it is checked.
func TestCheckRecord(t *testing.T) {
	_, pub := newUser(t)
	var logs natstest.LogBuffer
	a := policyAuthorizer(t, newVerifier(t), map[string]any{
		PolicyIdentityPrefix + "math-1": DirectoryEntry{Role: RoleAgent, Type: "math", PublicKey: pub},
		PolicyIdentityPrefix + "evil-1": DirectoryEntry{Role: RoleAgent, Type: "evil", PublicKey: pub},
		PolicyIdentityPrefix + "risk-1": DirectoryEntry{Role: RoleAgent, Type: "risk", Serves: []string{"risk.*"}, PublicKey: pub},
		PolicyIdentityPrefix + "gone-1": DirectoryEntry{Role: RoleAgent, Type: "math", PublicKey: pub, Revoked: time.Unix(1700000000, 0).UTC()},
		PolicyIdentityPrefix + "web":    DirectoryEntry{Role: RoleCaller, PublicKey: pub},
	}, WithAuthorizerLogger(zerolog.New(&logs)))
	rec := func(id, typ string, caps ...string) *registry.Entry {
		return &registry.Entry{Record: registry.Record{ID: id, Type: typ, Capabilities: caps}}
	}
	for _, c := range []struct {
		e    *registry.Entry
		want string // "" for routable
	}{
		{rec("math-1", "math", "math.add"), ""},
		{rec("math-1", "math", "math", "math.add.fast"), ""},
		{rec("risk-1", "risk", "risk.credit"), ""},
		{rec("risk-1", "risk", "risk.credit", "risk.credit.x"), "offers risk.credit.x, outside its identity's grant risk.*"},
		{rec("risk-1", "risk", "risk"), "offers risk, outside"},
		{rec("evil-1", "evil", "math.add"), "offers math.add, outside its identity's grant evil, evil.>"},
		{rec("evil-1", "math", "math.add"), `says type "math"; its identity is of type "evil"`},
		{rec("nobody-1", "math", "math.add"), "names no identity"},
		{rec("gone-1", "math", "math.add"), "revoked"},
		{rec("web", "math", "math.add"), "a caller, not an agent"},
	} {
		err := a.CheckRecord(c.e)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %v: refused: %v", c.e.ID, c.e.Capabilities, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %v: got %v, want %q", c.e.ID, c.e.Capabilities, err, c.want)
		}
	}
	const ignored = "agent record ignored: not routed (logged once per instance)"
	// Once per instance and reason: evil-1 gave two reasons above.
	before := len(logs.Lines(ignored))
	for range 100 {
		_ = a.CheckRecord(rec("evil-1", "evil", "math.add"))
		_ = a.CheckRecord(rec("nobody-1", "math", "math.add"))
	}
	if n := len(logs.Lines(ignored)); n != before+1 { // evil-1 changed its reason back once
		t.Fatalf("%d more refusals logged for 200 checks of two refused records, want 1 (evil-1's reason changed):\n%s", n-before, logs.String())
	}
	if n := len(logs.Lines(ignored)); n != 8 {
		t.Fatalf("%d refusals logged, want 8 (7 refused records, evil-1 twice)", n)
	}
	// Admitted again: logged once, and a later refusal is news again.
	for range 3 {
		if err := a.CheckRecord(rec("risk-1", "risk", "risk.credit")); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(logs.Lines("agent record within its identity's grant again: routed")); n != 1 {
		t.Fatalf("%d lines for risk-1 routed again, want 1", n)
	}
	_ = a.CheckRecord(rec("risk-1", "risk", "risk.credit.x"))
	if n := len(logs.Lines(ignored)); n != 9 {
		t.Fatalf("%d refusals logged, want 9 (risk-1 refused again)", n)
	}
}
