package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// resultArtifact is the id (and name) of the artifact holding a task's
// result, streamed or whole.
const resultArtifact = "result"

// streamMessage is SendStreamingMessage answered as the task runs: the
// message is streamed (Dispatcher.Stream), each chunk an artifact update
// of the result artifact (the first append: false, later ones append:
// true), then, when the task completed after chunks, a last update
// appending an empty text part with lastChunk: true, then the final task
// as SendMessage answers it. A client that goes away cancels the task.
// The response is written at the first event, so a message refused
// before any chunk (BAD_REQUEST, PAYLOAD_TOO_LARGE) is a JSON-RPC error
// as for SendMessage.
func (s *Server) streamMessage(w http.ResponseWriter, r *http.Request, req Request, t Task, ent *entry, capability string, m *nats.Msg) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CallTimeout)
	defer cancel()
	ev := &eventWriter{w: w, rc: http.NewResponseController(w), id: req.ID}
	chunks := 0
	reply := s.d.Stream(ctx, capability, m, func(c *nats.Msg) {
		if ctx.Err() != nil {
			return // the client is gone: Stream cancels the task
		}
		chunks++
		ev.write(StreamResponse{ArtifactUpdate: &TaskArtifactUpdateEvent{TaskID: t.ID, ContextID: t.ContextID,
			Artifact: Artifact{ArtifactID: resultArtifact, Name: resultArtifact, Parts: []Part{resultPart(c)}}, Append: chunks > 1}})
	})
	if ctx.Err() != nil && r.Context().Err() != nil {
		return // nobody to tell
	}
	code := streams.Code(reply.Header.Get(streams.HeaderError))
	if !ev.started && (code == streams.CodeBadRequest || code == streams.CodePayloadTooLarge) {
		writeRPC(w, req.ID, nil, rpcError(CodeInvalidParams, "%s: %s", code, failureText(reply)).withReachCode(code))
		return
	}
	t = taskOf(t, reply)
	ent.task = t
	s.tasks.add(ent)
	if chunks > 0 && code == "" {
		empty := ""
		ev.write(StreamResponse{ArtifactUpdate: &TaskArtifactUpdateEvent{TaskID: t.ID, ContextID: t.ContextID,
			Artifact: Artifact{ArtifactID: resultArtifact, Name: resultArtifact, Parts: []Part{{Text: &empty}}}, Append: true, LastChunk: true}})
	}
	ev.write(StreamResponse{Task: &t})
}

// eventWriter writes the events of a SendStreamingMessage answer, each a
// JSON-RPC response in a Server-Sent Event's data, flushed at once; the
// response's headers go with the first.
type eventWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	id      json.RawMessage
	started bool
}

func (e *eventWriter) write(v StreamResponse) {
	b, err := json.Marshal(response{JSONRPC: "2.0", ID: e.id, Result: v})
	if err != nil {
		b, _ = json.Marshal(response{JSONRPC: "2.0", ID: e.id, Error: rpcError(CodeInternalError, "result not encodable: %v", err)})
	}
	if !e.started {
		e.started = true
		h := e.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold the events back
		e.w.WriteHeader(http.StatusOK)
	}
	_, _ = fmt.Fprintf(e.w, "data: %s\n\n", b)
	_ = e.rc.Flush()
}
