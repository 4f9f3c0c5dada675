package stack

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher/gateway/console"
	"github.com/agent-reach/agentreach/streams"
)

// consoleAuth is the console's side of auth: the bearer token's identity
// (auth.Authorizer.Vouch), its role from its directory entry in
// REACH_POLICY, and the ACL (the authorizer's check of an in-process task).
type consoleAuth struct {
	az *auth.Authorizer
	js jetstream.JetStream
}

func (c consoleAuth) Identify(r *http.Request) (console.Identity, *streams.Error) {
	m := &nats.Msg{Header: nats.Header{}}
	if e := c.az.Vouch(r.Header.Get("Authorization"), m); e != nil {
		return console.Identity{}, e
	}
	name := m.Header.Get(streams.HeaderSource)
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var entry auth.DirectoryEntry
	kv, err := c.js.KeyValue(ctx, streams.BucketPolicy)
	if err == nil {
		var kve jetstream.KeyValueEntry
		if kve, err = kv.Get(ctx, auth.PolicyIdentityPrefix+name); err == nil {
			err = json.Unmarshal(kve.Value(), &entry)
		}
	}
	if err != nil {
		return console.Identity{}, streams.NewError(streams.CodeUnauthorized, "identity %s: its directory entry: %v", name, err)
	}
	return console.Identity{Name: name, Operator: entry.Role == auth.RoleDispatcher && entry.Revoked.IsZero()}, nil
}

func (c consoleAuth) MayCall(name, capability string) bool {
	return c.az.Authorize(capability, &nats.Msg{Header: nats.Header{streams.HeaderSource: {name}}}, false) == nil
}
