package auth

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/agent-reach/agentreach/registry/policy"
)

// PolicyIdentityPrefix starts the REACH_POLICY key of an identity's
// directory entry: "identity.billing-1". The Syncer writes the entries
// from the store; dispatchers read them to bind a Reach-Source to its user
// key.
const PolicyIdentityPrefix = "identity."

// DirectoryEntry is the value of identity.<name> in REACH_POLICY: what a
// dispatcher needs to know about an identity.
type DirectoryEntry struct {
	Role Role   `json:"role"`
	Type string `json:"type,omitempty"`
	// Serves is an agent's grant as made (Identity.Serves); empty means its
	// type and everything under it (Grant).
	Serves []string `json:"serves,omitempty"`
	// PublicKey is the identity's user nkey ("U…").
	PublicKey string `json:"public_key"`
	// Revoked is when the identity was revoked; then it proves nothing.
	Revoked time.Time `json:"revoked,omitzero"`
}

func init() { policy.RegisterKind(strings.TrimSuffix(PolicyIdentityPrefix, "."), decodeEntry) }

// entryOf returns the directory entry of id.
func entryOf(id Identity) DirectoryEntry {
	return DirectoryEntry{Role: id.Role, Type: id.Type, Serves: id.Serves, PublicKey: id.PublicKey, Revoked: id.Revoked}
}

// Grant returns the capability patterns the identity may be routed
// (Identity.Grant): nothing unless it is an agent.
func (e *DirectoryEntry) Grant() []string {
	if e.Role != RoleAgent {
		return nil
	}
	return grantOf(e.Type, e.Serves)
}

// decodeEntry is the policy.Decoder of the "identity" kind.
func decodeEntry(key string, value json.RawMessage) (any, error) {
	name, ok := strings.CutPrefix(key, PolicyIdentityPrefix)
	if !ok {
		return nil, fmt.Errorf("want the key identity.<name>")
	}
	var e DirectoryEntry
	dec := json.NewDecoder(strings.NewReader(string(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("identity entry: %v", err)
	}
	id := Identity{Name: name, Role: e.Role, Type: e.Type, Serves: e.Serves}
	if err := id.validate(); err != nil {
		return nil, fmt.Errorf("%v", strings.TrimPrefix(err.Error(), ErrInvalidIdentity.Error()+": "))
	}
	if !nkeys.IsValidPublicUserKey(e.PublicKey) {
		return nil, fmt.Errorf("public_key: %q is not a user nkey (U…)", e.PublicKey)
	}
	return &e, nil
}
