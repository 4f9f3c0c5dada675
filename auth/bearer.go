package auth

import (
	"crypto/hmac"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/streams"
)

// Vouch is the HTTP gateway's side of the ACL: it checks authorization,
// the value of a request's Authorization header ("Bearer <token>"), and
// makes m a task of the identity the token proves — its Reach-Source that
// name, whatever the client sent. A task the gateway publishes over NATS
// (m.Subject set: a submit, broadcast or fan-out) is signed as that
// identity too, so the replica that takes it verifies it like any other;
// one the gateway routes in process (m.Subject empty) is not, and no
// agent ever sees a signature. m's request id is set when it has none.
// The ACL itself is checked where the task is routed.
//
// A missing header is UNAUTHORIZED, one that is not a bearer token of this
// form BAD_REQUEST, an unknown, revoked or wrong token UNAUTHORIZED. It is
// safe for concurrent use.
func (a *Authorizer) Vouch(authorization string, m *nats.Msg) *streams.Error {
	if authorization == "" {
		return streams.NewError(streams.CodeUnauthorized,
			"no Authorization header: with auth on, send Authorization: Bearer <token> (`agentreach auth token NAME` prints an identity's)")
	}
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	version, rest, ok2 := strings.Cut(token, ".")
	name, _, ok3 := strings.Cut(rest, ".")
	if !ok || !ok2 || !ok3 || version != signature.BearerVersion || streams.ValidateInstanceID(name) != nil {
		return streams.NewError(streams.CodeBadRequest, "the Authorization header is no Agent-Reach bearer token (want Bearer %s.<name>.<mac>)", signature.BearerVersion)
	}
	entry := a.current().entry(name)
	switch {
	case entry == nil:
		return streams.NewError(streams.CodeUnauthorized, "the bearer token names %s, no known identity", name)
	case !entry.Revoked.IsZero():
		return streams.NewError(streams.CodeUnauthorized, "identity %s was revoked at %s", name, entry.Revoked.Format(time.RFC3339))
	}
	entry.once.Do(func() { entry.signer, entry.err = a.verifier.Signer(name, entry.PublicKey) })
	if entry.err != nil {
		return streams.NewError(streams.CodeUnauthorized, "identity %s: %v", name, entry.err)
	}
	if !hmac.Equal([]byte(token), []byte(entry.signer.Bearer())) {
		return streams.NewError(streams.CodeUnauthorized, "the bearer token of %s is not its own (made with other credentials, or the identity was re-created)", name)
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Del(HeaderSignature)
	m.Header.Set(streams.HeaderSource, name)
	if m.Subject != "" {
		if m.Header.Get(streams.HeaderRequestID) == "" {
			m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
		}
		entry.signer.Sign(m, a.now())
		if m.Header.Get(streams.HeaderMsgID) != "" {
			// A durable submission: deduplicated under the identity's
			// proof (Signer.SubmissionID), which no other caller can make.
			m.Header.Set(streams.HeaderMsgID, entry.signer.SubmissionID(m.Header.Get(streams.HeaderRequestID)))
		}
	}
	return nil
}
