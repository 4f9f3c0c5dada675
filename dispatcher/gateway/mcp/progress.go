package mcp

import (
	"bytes"
	"context"
	"encoding/json"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Streamer is a Source that can route a task as a stream (docs/protocol.md,
// Streaming results): each is given every chunk, in order, on the
// stream's goroutine, and Stream returns the final reply as Call does.
// each must return once ctx has ended. A tools/call that carries a
// progress token is streamed when its source is one, each chunk becoming
// a notifications/progress (DESIGN §16).
type Streamer interface {
	Stream(ctx context.Context, capability string, task *nats.Msg, each func(chunk *nats.Msg)) *nats.Msg
}

// Stream implements Streamer: Dispatcher.Stream in process.
func (s *dispatcherSource) Stream(ctx context.Context, capability string, task *nats.Msg, each func(chunk *nats.Msg)) *nats.Msg {
	return s.d.Stream(ctx, capability, task, each)
}

// MetaChunks is the _meta key of a streamed call's result that counts the
// progress notifications sent before it (a relay waits for as many).
const MetaChunks = "io.agentreach/chunks"

// streamCall routes task as a stream and sends each chunk to the session
// as a notifications/progress for token: progress the chunk's count,
// message its text. A notification that cannot be sent (the client gone)
// is dropped; the call ends as its context says. The result's _meta
// counts the notifications (MetaChunks).
func streamCall(ctx context.Context, src Streamer, ss *sdk.ServerSession, token any, capability string, task *nats.Msg) *sdk.CallToolResult {
	n := 0
	res := resultOf(src.Stream(ctx, capability, task, func(chunk *nats.Msg) {
		n++
		_ = ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: chunkText(chunk)})
	}))
	if n > 0 {
		if res.Meta == nil {
			res.Meta = sdk.Meta{}
		}
		res.Meta[MetaChunks] = n
	}
	return res
}

// chunkText is the text of a chunk: a JSON string's value, other JSON as
// it is, msgpack written as JSON, anything else as its bytes.
func chunkText(chunk *nats.Msg) string {
	data := bytes.TrimSpace(chunk.Data)
	switch streams.ContentType(chunk.Header, chunk.Data) {
	case streams.ContentTypeMsgpack:
		var v any
		if streams.Decode(streams.ContentTypeMsgpack, chunk.Data, &v) != nil {
			return ""
		}
		if s, ok := v.(string); ok {
			return s
		}
		b, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(b)
	default:
		if len(data) > 0 && data[0] == '"' {
			var s string
			if json.Unmarshal(data, &s) == nil {
				return s
			}
		}
		return string(data)
	}
}
