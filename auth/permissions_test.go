package auth

import (
	"slices"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// A caller's and an agent's permissions read only their own durable
// results: the subscription and the direct get under
// reach.result.<name>.>, and no JetStream call on REACH_RESULTS that takes
// another subject or a sequence (STREAM.MSG.GET, the bare DIRECT.GET) or
// lists the stream's subjects (STREAM.INFO). A dispatcher keeps them all.
func TestPermissionsReadOnlyOwnResults(t *testing.T) {
	acl, err := registry.ParseACL([]byte(`{"rules": [{"caller": "*", "may_call": ["echo"]}]}`))
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
			if strings.Contains(s, streams.StreamResults) && s != "$JS.API.DIRECT.GET.REACH_RESULTS."+own {
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
