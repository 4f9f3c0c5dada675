package auth

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// TestLeafPermissions: a leaf link may do what the active agents and
// callers it carries may, JetStream only in the hub's domain, plus
// answering into the dispatchers' inboxes when it carries an agent;
// carrying nothing (or only revoked or unknown names, or dispatchers) it
// may do nothing; alone, Permissions gives a leaf nothing either.
func TestLeafPermissions(t *testing.T) {
	acl, err := policy.ParseACL([]byte(`{"rules": [{"caller": "edge-a", "may_call": ["math.add"]}, {"caller": "web", "may_call": ["echo"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var subjects streams.Subjects
	a := Identity{Name: "edge-a", Role: RoleAgent, Type: "echo"}
	b := Identity{Name: "edge-b", Role: RoleAgent, Type: "math", Revoked: time.Now()}
	other := Identity{Name: "hub-c", Role: RoleAgent, Type: "echo"}
	d := Identity{Name: "dispatcher", Role: RoleDispatcher}
	c := Identity{Name: "web", Role: RoleCaller}
	all := []Identity{a, b, other, d, c}
	link := Identity{Name: "edge-1", Role: RoleLeaf, Carries: []string{"edge-a", "edge-b", "nobody"}}

	p := LeafPermissions(link, all, acl, subjects)
	for _, want := range []string{"$JS.hub.API.$KV.REACH_AGENTS.edge-a", "$JS.hub.API.STREAM.INFO.KV_REACH_AGENTS",
		"reach.task.math.add", "_INBOX.dispatcher.>"} {
		if !slices.Contains(p.Pub.Allow, want) {
			t.Errorf("the link may not publish %s: %v", want, p.Pub.Allow)
		}
	}
	for _, want := range []string{"reach.agent.edge-a", "_INBOX.edge-a.>", "reach.result.edge-a.>"} {
		if !slices.Contains(p.Sub.Allow, want) {
			t.Errorf("the link may not receive %s: %v", want, p.Sub.Allow)
		}
	}
	for _, s := range append(slices.Clone(p.Pub.Allow), p.Sub.Allow...) {
		switch {
		case strings.HasPrefix(s, "$JS.API.") || strings.HasPrefix(s, "$KV."):
			t.Errorf("%s cannot cross a leaf link; the link has it", s)
		case strings.Contains(s, "edge-b") || strings.Contains(s, "hub-c") || strings.Contains(s, "web") || strings.Contains(s, "math.>"):
			t.Errorf("the link has %s, of an identity it does not carry as an active agent", s)
		case strings.Contains(s, ">") && !strings.HasSuffix(s, ".>"):
			t.Errorf("the link has the wildcard %s", s)
		}
	}
	for _, want := range []string{"_INBOX.edge-a.>", "reach.agent.edge-a"} {
		if !slices.Contains(p.Pub.Deny, want) {
			t.Errorf("the link may publish %s (only the hub does): %v", want, p.Pub.Deny)
		}
	}

	for _, id := range []Identity{
		{Name: "edge-2", Role: RoleLeaf, Carries: []string{"edge-b", "hub-x", "dispatcher"}},
		{Name: "edge-3", Role: RoleLeaf},
	} {
		p := LeafPermissions(id, all, acl, subjects)
		if len(p.Pub.Allow)+len(p.Sub.Allow) != 0 || !slices.Equal(p.Pub.Deny, []string{">"}) || !slices.Equal(p.Sub.Deny, []string{">"}) {
			t.Errorf("%s carries no active agent or caller, yet may do %+v", id.Name, p)
		}
	}

	// A caller at the edge: its tasks, its replies and results, its
	// results read in the hub's domain; no dispatcher inbox to answer into.
	p = LeafPermissions(Identity{Name: "edge-4", Role: RoleLeaf, Carries: []string{"web"}}, all, acl, subjects)
	for _, want := range []string{"reach.submit.echo", "reach.task.echo", "$JS.hub.API.DIRECT.GET.REACH_RESULTS.reach.result.web.>"} {
		if !slices.Contains(p.Pub.Allow, want) {
			t.Errorf("the link of a caller may not publish %s: %v", want, p.Pub.Allow)
		}
	}
	for _, want := range []string{"_INBOX.web.>", "reach.result.web.>"} {
		if !slices.Contains(p.Sub.Allow, want) {
			t.Errorf("the link of a caller may not receive %s: %v", want, p.Sub.Allow)
		}
	}
	for _, s := range p.Pub.Allow {
		if strings.HasPrefix(s, "$JS.API.") || strings.HasPrefix(s, "_INBOX.") || strings.Contains(s, "edge-a") {
			t.Errorf("the link of a caller may publish %s", s)
		}
	}
	if !slices.Contains(p.Pub.Deny, "_INBOX.web.>") {
		t.Errorf("the link of a caller may publish into its inbox: %v", p.Pub.Deny)
	}
	if p := Permissions(link, acl, subjects); len(p.Pub.Allow)+len(p.Sub.Allow) != 0 || !slices.Equal(p.Pub.Deny, []string{">"}) {
		t.Errorf("Permissions gives a leaf %+v, want nothing (LeafPermissions says what)", p)
	}
}

func TestLeafIdentityValidation(t *testing.T) {
	store, err := Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Identity{
		{Name: "web", Role: RoleCaller, Carries: []string{"edge-a"}},
		{Name: "edge-1", Role: RoleLeaf, Carries: []string{"edge a"}},
		{Name: "edge-1", Role: RoleLeaf, Carries: []string{"edge-a", "edge-a"}},
		{Name: "edge-1", Role: RoleLeaf, Type: "echo"},
		{Name: "edge-1", Role: RoleLeaf, Serves: []string{"echo"}},
	} {
		if _, err := store.Add(bad); !errors.Is(err, ErrInvalidIdentity) {
			t.Errorf("Add(%+v) = %v, want ErrInvalidIdentity", bad, err)
		}
	}
	if len(store.Identities()) != 0 {
		t.Fatalf("refused identities left %v", store.Identities())
	}
	id, err := store.Add(Identity{Name: "edge-1", Role: RoleLeaf, Carries: []string{"edge-a"}})
	if err != nil || !slices.Equal(id.Carries, []string{"edge-a"}) {
		t.Fatalf("a leaf carrying edge-a: %+v, %v", id, err)
	}
	if name, role, err := CredentialsName(store.CredsFile("edge-1")); err != nil || name != "edge-1" || role != RoleLeaf {
		t.Errorf("CredentialsName of a leaf's credentials: %s %s %v", name, role, err)
	}
}
