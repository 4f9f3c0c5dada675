package policy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry/policy"
)

func TestParseACL(t *testing.T) {
	acl, err := policy.ParseACL([]byte("rules:\n  - caller: billing-*\n    may_call: [payment.*, ledger.>]\n  - caller: '*'\n    may_call: [echo]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		caller, capability string
		want               bool
	}{
		{"billing-1", "payment.execute", true},
		{"billing-eu-2", "ledger.entry.post", true},
		{"billing-1", "payment.refund.partial", false}, // '*' is one token
		{"billing-1", "ledger", false},                 // '>' needs a token
		{"billing-1", "echo", true},
		{"ops-1", "echo", true},
		{"ops-1", "payment.execute", false},
		{"xbilling-1", "payment.execute", false},
	} {
		if got := acl.Allows(c.caller, c.capability); got != c.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", c.caller, c.capability, got, c.want)
		}
	}
	if got := acl.Grants("billing-1"); !slices.Equal(got, []string{"echo", "ledger.>", "payment.*"}) {
		t.Errorf("Grants(billing-1) = %v", got)
	}
	if got := acl.Grants("ops-1"); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("Grants(ops-1) = %v", got)
	}
	var none *policy.ACL
	if none.Allows("a", "echo") || none.Grants("a") != nil {
		t.Error("a nil ACL grants something")
	}
}

func TestParseACLRefuses(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{}`, `rules: required`},
		{`{"rules": [], "default": "allow"}`, `default: unknown field`},
		{`{"rules": [{"caller": "a", "may_call": ["x"]}], "rules": []}`, `rules: key given twice`},
		{`{"rules": [{"caller": "", "may_call": ["echo"]}]}`, `rules[0].caller: required`},
		{`{"rules": [{"caller": "bill.ing", "may_call": ["echo"]}]}`, `rules[0].caller: "bill.ing": an identity name holds only`},
		{`{"rules": [{"caller": "a"}]}`, `rules[0].may_call: required`},
		{`{"rules": [{"caller": "a", "may_call": ["pay*"]}]}`, `rules[0].may_call[0]: "pay*": a wildcard must be a whole token`},
		{`{"rules": [{"caller": "a", "may_call": ["echo", ">.x"]}]}`, `rules[0].may_call[1]: ">.x": '>' may only be the last token`},
		{`{"rules": [{"caller": "a", "may_call": ["Echo"]}]}`, `rules[0].may_call[0]: "Echo": token "Echo" must be lowercase`},
		{`{"rules": [{"caller": "a", "may_call": [""]}]}`, `rules[0].may_call[0]: empty`},
		{`{"rules": [{"caller": "a", "may_call": "echo"}]}`, `rules[0].may_call: want an array`},
		{`{"rules": [{"caller": "a", "may_call": ["x"], "deny": true}]}`, `rules[0].deny: unknown field`},
	} {
		_, err := policy.ParseACL([]byte(c.src))
		if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseACL(%s) = %v, want ErrInvalid naming %q", c.src, err, c.want)
		}
	}
	if _, err := policy.Parse("acl.extra", []byte(`{"rules": []}`)); err == nil || !strings.Contains(err.Error(), `under the key "acl" alone`) {
		t.Errorf("acl.extra: %v", err)
	}
}

func TestMatchCapability(t *testing.T) {
	for _, c := range []struct {
		pattern, capability string
		want                bool
	}{
		{"echo", "echo", true},
		{"echo", "echo.x", false},
		{"echo.x", "echo", false},
		{"*", "echo", true},
		{"*", "echo.x", false},
		{">", "echo.x.y", true},
		{"a.>", "a", false},
		{"a.>", "a.b.c", true},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
		{"*", "", false},
	} {
		if got := policy.MatchCapability(c.pattern, c.capability); got != c.want {
			t.Errorf("MatchCapability(%q, %q) = %v, want %v", c.pattern, c.capability, got, c.want)
		}
	}
}

// FuzzParseACL: an ACL the decoder accepts has valid patterns, grants only
// what Allows allows, and reads back from its JSON form unchanged.
func FuzzParseACL(f *testing.F) {
	for _, s := range []string{
		`{"rules":[{"caller":"billing-*","may_call":["payment.*"]}]}`,
		`{"rules":[{"caller":"*","may_call":[">"]},{"caller":"a*b*c","may_call":["x.>","y"]}]}`,
		"rules:\n  - caller: ops-1\n    may_call: [echo]\n",
		`{"rules":[]}`,
		`{"rules":[{"caller":"a","may_call":["pay*"]}]}`,
	} {
		f.Add([]byte(s), "billing-1", "payment.execute")
	}
	f.Fuzz(func(t *testing.T, data []byte, caller, capability string) {
		v, err := policy.Parse(policy.KeyACL, data)
		if err != nil {
			if !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		acl := v.Decoded.(*policy.ACL)
		for _, r := range acl.Rules {
			for _, p := range r.MayCall {
				if err := policy.ValidateCapabilityPattern(p); err != nil {
					t.Fatalf("accepted an invalid pattern: %v", err)
				}
			}
		}
		if acl.Allows(caller, capability) && !slices.ContainsFunc(acl.Grants(caller), func(p string) bool {
			return policy.MatchCapability(p, capability)
		}) {
			t.Fatalf("Allows(%q, %q) but no grant matches", caller, capability)
		}
		again, err := policy.ParseACL(v.JSON)
		if err != nil || len(again.Rules) != len(acl.Rules) {
			t.Fatalf("JSON form %s reads back as %v, %v", v.JSON, again, err)
		}
	})
}
