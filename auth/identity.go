package auth

import (
	"fmt"
	"slices"
	"time"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// Role is what an identity is for; its permissions follow from it
// (Permissions).
type Role string

// The roles.
const (
	// RoleAgent serves capabilities as the instance its name is, and calls
	// what the ACL grants it.
	RoleAgent Role = "agent"
	// RoleCaller calls what the ACL grants it: applications, the CLI's
	// call and submit, the HTTP gateway's own connection.
	RoleCaller Role = "caller"
	// RoleDispatcher routes: it serves the task subjects, delivers to
	// agents, provisions and uses every bucket and stream. Operators use
	// it for the CLI's administrative commands too.
	RoleDispatcher Role = "dispatcher"
	// RoleLeaf is the link of a leaf node server that carries agents and
	// callers at the edge to the hub cluster: what may cross the link is
	// the union of what the identities it carries (Carries) may do, no more.
	RoleLeaf Role = "leaf"
)

// Roles lists the roles in the order `agentreach auth ls` sorts them.
func Roles() []Role { return []Role{RoleDispatcher, RoleAgent, RoleCaller, RoleLeaf} }

// Identity is one agent, caller or dispatcher as the store keeps it.
type Identity struct {
	// Name is the identity's name: an agent's instance id, a caller's or a
	// dispatcher's name (letters, digits, '_' and '-'). Reach-Source names
	// it; ACL rules match it.
	Name string `json:"name"`
	Role Role   `json:"role"`
	// Type is an agent's type (its REACH_CAPS key); empty for other roles.
	Type string `json:"type,omitempty"`
	// Serves is an agent's grant: the capability patterns ('*' one token,
	// '>' the rest, as NATS subjects) it may be routed and keep idempotency
	// outcomes for. Empty means Type and Type.> (Grant).
	Serves []string `json:"serves,omitempty"`
	// Carries is a leaf link's list of the agent and caller identities
	// behind it: its permissions are the union of theirs
	// (LeafPermissions). Empty for other roles.
	Carries []string `json:"carries,omitempty"`
	// PublicKey is the identity's user nkey ("U…"), bound to Name.
	PublicKey string `json:"public_key"`
	// SigningKey is the account's scoped signing key ("A…") that issued
	// the identity's credentials; its template holds the permissions.
	SigningKey string    `json:"signing_key"`
	Created    time.Time `json:"created"`
	// Revoked is when the identity was revoked; zero while it is valid.
	Revoked time.Time `json:"revoked,omitzero"`
}

// Active reports whether the identity has not been revoked.
func (id Identity) Active() bool { return id.Revoked.IsZero() }

// validate reports why id cannot be made, wrapping ErrInvalidIdentity.
func (id Identity) validate() error {
	if err := streams.ValidateInstanceID(id.Name); err != nil {
		return fmt.Errorf("%w: name: %v", ErrInvalidIdentity, err)
	}
	if !slices.Contains(Roles(), id.Role) {
		return fmt.Errorf("%w: role %q: want agent, caller, dispatcher or leaf", ErrInvalidIdentity, id.Role)
	}
	switch {
	case id.Role == RoleAgent && id.Type == "":
		return fmt.Errorf("%w: agent %s: --type is required (its agent type, the REACH_CAPS key it may write)", ErrInvalidIdentity, id.Name)
	case id.Role == RoleAgent:
		if err := streams.ValidateCapability(id.Type); err != nil {
			return fmt.Errorf("%w: type: %v", ErrInvalidIdentity, err)
		}
	case id.Type != "":
		return fmt.Errorf("%w: %s %s: only an agent has a type", ErrInvalidIdentity, id.Role, id.Name)
	}
	if len(id.Serves) > 0 && id.Role != RoleAgent {
		return fmt.Errorf("%w: %s %s: only an agent serves capabilities (--serves)", ErrInvalidIdentity, id.Role, id.Name)
	}
	if err := ValidateServes(id.Serves); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidIdentity, err)
	}
	if len(id.Carries) > 0 && id.Role != RoleLeaf {
		return fmt.Errorf("%w: %s %s: only a leaf link carries agents and callers (--carries)", ErrInvalidIdentity, id.Role, id.Name)
	}
	if len(id.Carries) > MaxCarries {
		return fmt.Errorf("%w: carries: %d agents, more than the %d allowed", ErrInvalidIdentity, len(id.Carries), MaxCarries)
	}
	for i, name := range id.Carries {
		if err := streams.ValidateInstanceID(name); err != nil {
			return fmt.Errorf("%w: carries[%d]: %v", ErrInvalidIdentity, i, err)
		}
		if slices.Contains(id.Carries[:i], name) {
			return fmt.Errorf("%w: carries[%d]: %q is given twice", ErrInvalidIdentity, i, name)
		}
	}
	return nil
}

// MaxCarries bounds the agents one leaf link carries.
const MaxCarries = 256

// MaxServes bounds the patterns of one agent's grant.
const MaxServes = 64

// ValidateServes reports why patterns cannot be an agent's grant: each is
// a capability whose tokens may be '*' (any one token) or, last, '>' (one
// or more tokens), as in the ACL's may_call ("risk.*", "risk.>"), given
// once; at most MaxServes of them.
func ValidateServes(patterns []string) error {
	if len(patterns) > MaxServes {
		return fmt.Errorf("serves: %d patterns, more than the %d allowed", len(patterns), MaxServes)
	}
	for i, p := range patterns {
		if err := policy.ValidateCapabilityPattern(p); err != nil {
			return fmt.Errorf("serves[%d]: %v", i, err)
		}
		if slices.Contains(patterns[:i], p) {
			return fmt.Errorf("serves[%d]: %q is given twice", i, p)
		}
	}
	return nil
}

// Grant returns the capability patterns an agent identity may serve: its
// Serves, or when none was given its type and everything under it
// ("math", "math.>"). Other roles serve nothing.
func (id Identity) Grant() []string {
	switch {
	case id.Role != RoleAgent:
		return nil
	default:
		return grantOf(id.Type, id.Serves)
	}
}

// grantOf is the grant of an agent of type typ that serves serves.
func grantOf(typ string, serves []string) []string {
	if len(serves) > 0 {
		return serves
	}
	return []string{typ, typ + ".>"}
}

// Grants reports whether grant (Identity.Grant) covers capability.
func Grants(grant []string, capability string) bool {
	return slices.ContainsFunc(grant, func(p string) bool { return policy.MatchCapability(p, capability) })
}

// InboxPrefix is the reply-inbox prefix of identity name: it may subscribe
// under it and nowhere else among inboxes, so no identity reads another's
// replies. Its connections must use it (nats.CustomInboxPrefix;
// ConnectOptions does).
func InboxPrefix(name string) string { return "_INBOX." + name }
