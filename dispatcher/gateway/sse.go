package gateway

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// Streaming over HTTP (docs/protocol.md, Streaming results): POST
// /v1/stream/{capability}, or POST /v1/call/{capability} with Accept:
// text/event-stream, answers Server-Sent Events — one `chunk` event per
// chunk (id its Reach-Seq, data its body), then one `result` event (the
// whole result) or one `error` event ({"code", "message"}). Errors before
// the task starts (a bad body, UNAUTHORIZED) are ordinary JSON answers.
// The response's headers carry the task's Reach-Request-Id. A client that
// goes away cancels the task (its agent gets a CANCEL); a client reading
// slower than the agent writes holds at most the dispatcher's per-stream
// bound of chunks (config.Config.StreamBuffer), then gets `error`
// OVERLOADED.

// Event names of a stream over HTTP.
const (
	EventChunk  = "chunk"
	EventResult = "result"
	EventError  = "error"
)

// wantsEventStream reports whether r's Accept asks for Server-Sent Events.
func wantsEventStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
			return true
		}
	}
	return false
}

// stream is POST /v1/stream/{capability}: the task's chunks and outcome as
// Server-Sent Events.
func (g *Gateway) stream(w http.ResponseWriter, r *http.Request) {
	capability := r.PathValue("capability")
	m, f := readTask(w, r, capability, g.cfg.MaxBody)
	if f != nil {
		g.answer(w, r, f)
		return
	}
	if m.Header.Get(streams.HeaderRequestID) == "" {
		m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
	}
	if f := g.identify(r, m); f != nil {
		g.answer(w, r, f)
		return
	}
	ctx, cancel := g.callContext(r)
	defer cancel()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold the events back
	h.Set(streams.HeaderRequestID, m.Header.Get(streams.HeaderRequestID))
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	final := g.d.Stream(ctx, capability, m, func(c *nats.Msg) {
		if ctx.Err() != nil {
			return // the client is gone: Stream cancels the task
		}
		writeEvent(w, EventChunk, c.Header.Get(streams.HeaderSeq), eventData(c))
		_ = rc.Flush()
	})
	if ctx.Err() != nil && r.Context().Err() != nil {
		return // nobody to tell
	}
	if e := streams.ErrorFromMessage(final); e != nil && e.Code != streams.CodeIncomplete {
		b, _ := json.Marshal(e)
		writeEvent(w, EventError, "", b)
	} else {
		writeEvent(w, EventResult, final.Header.Get(streams.HeaderChunks), eventData(final))
	}
	_ = rc.Flush()
}

// eventData is a message's body as an event's data: JSON as it is, any
// other body as a JSON string.
func eventData(m *nats.Msg) []byte {
	ct := streams.ContentType(m.Header, m.Data)
	if ct == streams.ContentTypeJSON && json.Valid(m.Data) {
		return m.Data
	}
	if ct == streams.ContentTypeMsgpack {
		var v any
		if streams.Decode(ct, m.Data, &v) == nil {
			if b, err := json.Marshal(v); err == nil {
				return b
			}
		}
	}
	b, _ := json.Marshal(string(m.Data))
	return b
}

// writeEvent writes one event; data's lines each become a data: field, as
// the format wants (a reader joins them with newlines again).
func writeEvent(w http.ResponseWriter, event, id string, data []byte) {
	var b bytes.Buffer
	b.WriteString("event: " + event + "\n")
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	for _, line := range bytes.Split(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")), []byte("\n")) {
		b.WriteString("data: ")
		b.Write(bytes.TrimSuffix(line, []byte("\r")))
		b.WriteString("\n")
	}
	b.WriteString("\n")
	_, _ = w.Write(b.Bytes())
}
