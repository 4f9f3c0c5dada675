package auth

import (
	"slices"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// An agent's REACH_IDEMPOTENCY keys follow its grant: for a pattern p,
// exactly the keys <capability>.<caller>.<key> of the capabilities p
// matches.
func TestIdempotencyKeys(t *testing.T) {
	for _, c := range []struct {
		id   Identity
		want []string
	}{
		{Identity{Name: "math-1", Role: RoleAgent, Type: "math"}, []string{"math.*.*", "math.*.*.>"}},
		{Identity{Name: "r-1", Role: RoleAgent, Type: "risk", Serves: []string{"risk.*", "a.b.>", ">", "*"}},
			[]string{"risk.*.*.*", "a.b.*.*.>", "*.*.>", "*.*.*"}},
		{Identity{Name: "cli", Role: RoleCaller}, nil},
		{Identity{Name: "d", Role: RoleDispatcher}, nil},
	} {
		if got := IdempotencyKeys(c.id); !slices.Equal(got, c.want) {
			t.Errorf("IdempotencyKeys(%s %v) = %q, want %q", c.id.Type, c.id.Serves, got, c.want)
		}
	}

	patterns := []string{"math", "math.>", "math.*", "risk.*", "a.b.>", ">", "*", "a.*.c"}
	capabilities := []string{"math", "math.add", "math.add.int", "risk", "risk.score", "risk.score.v2", "a", "a.b", "a.b.c",
		"a.x.c", "a.b.c.d", "other"}
	for _, p := range patterns {
		keys := IdempotencyKeys(Identity{Name: "x", Role: RoleAgent, Type: "x", Serves: []string{p}})
		for _, c := range capabilities {
			key := streams.IdempotencyKey(c, "alice", "order-1")
			allowed := slices.ContainsFunc(keys, func(k string) bool { return subjectMatch(k, key) })
			if want := subjectMatch(p, c); allowed != want {
				t.Errorf("pattern %q, capability %q: key %q allowed %v by %q, want %v", p, c, key, allowed, keys, want)
			}
		}
	}
}

// An agent reads and writes REACH_IDEMPOTENCY by key within its grant only:
// no bucket-wide write, no consumer, no read whose body names the subject.
// Its other buckets keep what they had.
func TestAgentIdempotencyPermissions(t *testing.T) {
	acl, err := policy.ParseACL([]byte(`{"rules": [{"caller": "*", "may_call": [">"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := Permissions(Identity{Name: "math-1", Role: RoleAgent, Type: "math"}, acl, streams.Subjects{})
	for _, s := range []string{
		"$KV.REACH_IDEMPOTENCY.math.*.*", "$KV.REACH_IDEMPOTENCY.math.*.*.>",
		"$JS.API.DIRECT.GET.KV_REACH_IDEMPOTENCY.$KV.REACH_IDEMPOTENCY.math.*.*",
		"$JS.API.DIRECT.GET.KV_REACH_IDEMPOTENCY.$KV.REACH_IDEMPOTENCY.math.*.*.>",
		"$JS.API.STREAM.INFO.KV_REACH_IDEMPOTENCY",
		"$JS.API.STREAM.MSG.GET.KV_REACH_AGENTS", "$JS.API.DIRECT.GET.KV_REACH_AGENTS.>",
	} {
		if !slices.Contains(p.Pub.Allow, s) {
			t.Errorf("agent may not publish to %s: %q", s, p.Pub.Allow)
		}
	}
	for _, s := range p.Pub.Allow {
		if strings.Contains(s, "IDEMPOTENCY") && (strings.Contains(s, "CONSUMER") || strings.Contains(s, "MSG.GET") ||
			strings.HasPrefix(s, "$JS.FC.") || strings.HasSuffix(s, "IDEMPOTENCY.>") || s == "$JS.API.DIRECT.GET.KV_REACH_IDEMPOTENCY") {
			t.Errorf("agent may publish to %s", s)
		}
	}
}

// subjectMatch reports whether NATS subject pattern p matches subject s.
func subjectMatch(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, tok := range pt {
		switch {
		case tok == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case tok != "*" && tok != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}

// A caller's and an agent's permissions read only their own durable
// results: the subscription and the direct get under
// reach.result.<name>.>, and no JetStream call on REACH_RESULTS that takes
// another subject or a sequence (STREAM.MSG.GET, the bare DIRECT.GET) or
// lists the stream's subjects (STREAM.INFO). A dispatcher keeps them all.
func TestPermissionsReadOnlyOwnResults(t *testing.T) {
	acl, err := policy.ParseACL([]byte(`{"rules": [{"caller": "*", "may_call": ["echo"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var subjects streams.Subjects
	for _, id := range []Identity{{Name: "alice", Role: RoleCaller}, {Name: "echo-1", Role: RoleAgent, Type: "echo"}} {
		p := Permissions(id, acl, subjects)
		own := "reach.result." + id.Name + ".>"
		if !slices.Contains(p.Sub.Allow, own) {
			t.Errorf("%s may not subscribe to %s: %v", id.Name, own, p.Sub.Allow)
		}
		if !slices.Contains(p.Pub.Allow, "$JS.API.DIRECT.GET.REACH_RESULTS."+own) {
			t.Errorf("%s may not direct-get its results: %v", id.Name, p.Pub.Allow)
		}
		for _, s := range p.Sub.Allow {
			if strings.HasPrefix(s, "reach.result.") && s != own {
				t.Errorf("%s may subscribe to %s", id.Name, s)
			}
		}
		for _, s := range p.Pub.Allow {
			if strings.Contains(s, streams.StreamResults) && s != "$JS.API.DIRECT.GET.REACH_RESULTS."+own &&
				s != "$JS."+HubDomain+".API.DIRECT.GET.REACH_RESULTS."+own {
				t.Errorf("%s may publish to %s", id.Name, s)
			}
			if strings.HasPrefix(s, "reach.result.") {
				t.Errorf("%s may publish a result: %s", id.Name, s)
			}
		}
	}
	d := Permissions(Identity{Name: "dispatcher", Role: RoleDispatcher}, acl, subjects)
	if !slices.Contains(d.Pub.Allow, "reach.result.>") || !slices.Contains(d.Pub.Allow, "$JS.API.>") {
		t.Errorf("a dispatcher may not publish results or read the stream: %v", d.Pub.Allow)
	}
}

// A grant ending in '*' gets a deny below its dead letters and review
// entries, unless another grant of the same identity reaches below it.
func TestDeepenedGrants(t *testing.T) {
	for _, c := range []struct {
		grant  string
		grants []string
		want   bool
	}{
		{"math.*", []string{"math.*"}, true},
		{"*", []string{"*"}, true},
		{"math.add", []string{"math.add"}, false},
		{"math.>", []string{"math.>"}, false},
		{"math.*.add", []string{"math.*.add"}, false},
		{"math.*", []string{"math.*", "math.vault.open"}, false},
		{"math.*", []string{"math.*", "math.>"}, false},
		{"math.*", []string{"math.*", ">"}, false},
		{"math.*", []string{"math.*", "*.vault.open"}, false},
		{"math.*", []string{"math.*", "risk.vault.open", "echo"}, true},
		{"*", []string{"*", "math.add"}, false},
		{"x*", []string{"x*"}, false},
	} {
		if got := deepened(c.grant, c.grants); got != c.want {
			t.Errorf("deepened(%q, %q) = %v, want %v", c.grant, c.grants, got, c.want)
		}
	}
}
