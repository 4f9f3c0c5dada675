package agentkit

import (
	"context"
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

// mayPublish reports whether a publish to subject has passed the server
// since the client was made.
func (c *Client) mayPublish(subject string) bool {
	_, ok := c.published.Load(subject)
	return ok
}

// refusal is a publish the server refused for want of permission.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

// firstRequest sends a request of a client with credentials to a subject
// it has not published to yet. A publish the server refuses (the ACL does
// not grant the capability) gets no reply, only a permissions violation
// ahead of the next PONG: so it flushes after publishing, and returns a
// *refusal at once instead of waiting for the caller's deadline. Once a
// publish has passed, the subject takes the usual request path (a later
// refusal, after an ACL change, is then learned at the deadline).
func (c *Client) firstRequest(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	before := c.nc.LastError() // the connection's last error is sticky: only a new one is this publish's
	m.Reply = inbox
	if err := c.nc.PublishMsg(m); err != nil {
		return nil, err
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	if last := c.nc.LastError(); last != before { // a new error since the publish: perhaps its refusal
		if denied := c.refused(m.Subject); denied != nil {
			return nil, &refusal{denied}
		}
	}
	c.published.Store(m.Subject, struct{}{})
	reply, err := sub.NextMsgWithContext(ctx)
	if err == nil && len(reply.Data) == 0 && reply.Header.Get("Status") == "503" { // as RequestMsg reads it
		return nil, nats.ErrNoResponders
	}
	return reply, err
}
