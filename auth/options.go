package auth

import (
	"fmt"
	"slices"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/nats-io/nats.go"
)

// ConnectOptions returns the connection options of an identity whose
// credentials are credsFile: nats.UserCredentials, and for an Agent-Reach
// identity (made by `agentreach auth`) nats.CustomInboxPrefix with its
// InboxPrefix — the only inboxes its permissions let it read. Credentials
// made elsewhere (nsc) get the default inbox prefix. The file is read
// now, so a missing or foreign one is reported before any dialling.
func ConnectOptions(credsFile string) ([]nats.Option, error) {
	c, err := readCreds(credsFile)
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.UserCredentials(credsFile)}
	if c.role != "" {
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(c.name)))
	}
	return opts, nil
}

// CredentialsName returns the identity name in credsFile's user JWT and
// whether `agentreach auth` made it (its role is known).
func CredentialsName(credsFile string) (name string, role Role, err error) {
	c, err := readCreds(credsFile)
	if err != nil {
		return "", "", err
	}
	if c.role == "" {
		return c.name, "", nil
	}
	if r := Role(c.role); slices.Contains(Roles(), r) {
		return c.name, r, nil
	}
	return "", "", fmt.Errorf("%w: %s: unknown role %q", signature.ErrInvalidCredentials, credsFile, c.role)
}
