package auth

import (
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Bearer returns the identity an HTTP Authorization header ("Bearer
// <token>") proves, and its role, with the errors of Vouch: the
// dashboard's actions are that identity's, under the ACL.
func (a *Authorizer) Bearer(authorization string) (string, Role, *streams.Error) {
	m := &nats.Msg{Header: nats.Header{}}
	if e := a.Vouch(authorization, m); e != nil {
		return "", "", e
	}
	name := m.Header.Get(streams.HeaderSource)
	entry := a.current().entry(name)
	if entry == nil { // removed between the two looks
		return "", "", streams.NewError(streams.CodeUnauthorized, "the bearer token names %s, no known identity", name)
	}
	return name, entry.Role, nil
}

// MayCall reports whether the ACL in force lets identity name call
// capability.
func (a *Authorizer) MayCall(name, capability string) bool {
	return a.current().acl.Allows(name, capability)
}
