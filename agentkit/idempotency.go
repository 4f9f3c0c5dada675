package agentkit

import (
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit/internal/idem"
	"github.com/agent-reach/agentreach/streams"
)

// HeaderReplayed marks a result served from REACH_IDEMPOTENCY instead of a
// new execution.
const HeaderReplayed = "Reach-Replayed"

// replayMsg turns a stored outcome into a reply.
func replayMsg(subject, requestID, node string, rec *idem.Record) *nats.Msg {
	var m *nats.Msg
	if rec.Error != nil {
		m = streams.ErrorReply(subject, rec.ContentType, requestID, rec.Error)
	} else {
		m = streams.StatusReply(subject, streams.StatusFinished, requestID)
		m.Header.Set(streams.HeaderContentType, rec.ContentType)
		m.Data = rec.Data
	}
	m.Header.Set(streams.HeaderNode, node)
	m.Header.Set(HeaderReplayed, "true")
	if rec.Cost != "" {
		m.Header.Set(streams.HeaderCost, rec.Cost)
	}
	return m
}
