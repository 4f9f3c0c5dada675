package agentkit

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/signature"
)

// WithCredentials makes the client sign every task it sends as the
// identity whose credentials file (made by `agentreach auth`) is
// credsFile: Reach-Source is that identity, and Reach-Signature proves it
// to dispatchers that check (docs/security.md). Connect with the same
// file (auth.ConnectOptions). NewClient reports a file that cannot sign.
func WithCredentials(credsFile string) ClientOption {
	return func(c *Client) {
		if c.signer, c.signerErr = auth.LoadSigner(credsFile); c.signerErr != nil {
			c.signerErr = fmt.Errorf("agentkit: WithCredentials: %w", c.signerErr)
		}
	}
}

// WithSigner makes the client sign every task it sends with s (see
// WithCredentials).
func WithSigner(s *signature.Signer) ClientOption { return func(c *Client) { c.signer = s } }

// checkSigner refuses a signer that could not be made, or one whose
// identity is not the WithSource the client was also given.
func (c *Client) checkSigner() error {
	switch {
	case c.signerErr != nil:
		return c.signerErr
	case c.signer != nil && c.source != "" && c.source != c.signer.Name():
		return fmt.Errorf("agentkit: WithSource(%q) names another identity than the credentials' %q", c.source, c.signer.Name())
	}
	return nil
}

// sign signs m, once it is complete, when the client has credentials; the
// signature covers its request id, subject and body.
func (c *Client) sign(m *nats.Msg) {
	if c.signer != nil {
		c.signer.Sign(m, time.Now())
	}
}
