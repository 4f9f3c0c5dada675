package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// passed are the HTTP request headers of the wire contract that travel
// with a message's task.
var passed = []string{streams.HeaderTimeout, streams.HeaderDeadline, streams.HeaderIdempotencyKey,
	streams.HeaderSource, streams.HeaderTraceParent, "tracestate"}

// sendMessage is SendMessage and SendStreamingMessage: a routed call of
// the skill the message names (or the type's only one), answered as a
// task; with returnImmediately, the task runs on and is answered WORKING
// (as the one event of a stream for SendStreamingMessage); else
// SendStreamingMessage streams the result (streamMessage).
func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request, req Request, v typeView) {
	var p SendMessageRequest
	if e := decodeParams(req.Params, &p); e != nil {
		writeRPC(w, req.ID, nil, e)
		return
	}
	payload, e := payloadOf(p.Message)
	if e != nil {
		writeRPC(w, req.ID, nil, e)
		return
	}
	capability, e := skillOf(&p, v)
	if e != nil {
		writeRPC(w, req.ID, nil, e)
		return
	}
	m := &nats.Msg{Header: nats.Header{}, Data: payload}
	for _, h := range passed {
		if v := r.Header.Get(h); v != "" {
			m.Header.Set(h, v)
		}
	}
	m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	id := streams.NewRequestID()
	m.Header.Set(streams.HeaderRequestID, id)
	if !s.identify(w, r, m) {
		return
	}
	contextID := p.Message.ContextID
	if contextID == "" {
		contextID = id
	}
	t := Task{ID: id, ContextID: contextID, Status: TaskStatus{State: StateWorking, Timestamp: now()},
		Metadata: &TaskMetadata{AgentReach: ReachMetadata{Capability: capability, RequestID: id}}}
	ent := &entry{task: t, caller: m.Header.Get(streams.HeaderSource)}
	background := p.Configuration != nil && p.Configuration.ReturnImmediately
	if background {
		ctx, cancel := context.WithTimeout(s.ctx, s.d.Config().Deadline)
		ent.cancel, ent.done = cancel, make(chan struct{})
		if !s.start() {
			cancel()
			writeRPC(w, req.ID, nil, rpcError(CodeInternalError, "the server is closing").withReachCode(streams.CodeOverloaded))
			return
		}
		if !s.tasks.add(ent) {
			cancel()
			s.wg.Done()
			writeRPC(w, req.ID, nil, rpcError(CodeInternalError, "%d tasks run in the background already; try again later",
				s.cfg.MaxTasks).withReachCode(streams.CodeOverloaded))
			return
		}
		go func() {
			defer s.wg.Done()
			defer cancel()
			s.tasks.update(taskOf(t, s.d.Call(ctx, capability, m)))
			close(ent.done)
		}()
		s.answerTask(w, req, t)
		return
	}
	if req.Method == MethodSendStreamingMessage {
		s.streamMessage(w, r, req, t, ent, capability, m) // stream.go
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CallTimeout)
	defer cancel()
	reply := s.d.Call(ctx, capability, m)
	if code := streams.Code(reply.Header.Get(streams.HeaderError)); code == streams.CodeBadRequest || code == streams.CodePayloadTooLarge {
		writeRPC(w, req.ID, nil, rpcError(CodeInvalidParams, "%s: %s", code, failureText(reply)).withReachCode(code))
		return
	}
	t = taskOf(t, reply)
	ent.task = t
	s.tasks.add(ent) // when full of running tasks, it is not remembered: the answer is complete anyway
	s.answerTask(w, req, t)
}

// start counts a background task unless the server is closing.
func (s *Server) start() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return false
	}
	s.wg.Add(1)
	return true
}

// answerTask answers t: as the result for SendMessage, as the one event
// of a stream for SendStreamingMessage with returnImmediately.
func (s *Server) answerTask(w http.ResponseWriter, req Request, t Task) {
	if req.Method != MethodSendStreamingMessage {
		writeRPC(w, req.ID, SendMessageResponse{Task: &t}, nil)
		return
	}
	b, err := json.Marshal(response{JSONRPC: "2.0", ID: req.ID, Result: StreamResponse{Task: &t}})
	if err != nil {
		writeRPC(w, req.ID, nil, rpcError(CodeInternalError, "result not encodable: %v", err))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
}

// skillOf returns the capability a message calls: metadata.skill (of the
// request or the message), else the type's only capability.
func skillOf(p *SendMessageRequest, v typeView) (string, *RPCError) {
	skill, _ := p.Metadata["skill"].(string)
	if skill == "" {
		skill, _ = p.Message.Metadata["skill"].(string)
	}
	switch {
	case skill != "" && streams.ValidateCapability(skill) != nil:
		return "", rpcError(CodeInvalidParams, "metadata.skill %q is not a capability name", skill).withReachCode(streams.CodeBadRequest)
	case skill != "" && v.name != "" && !slices.Contains(v.caps, skill):
		return "", rpcError(CodeInvalidParams, "agent type %s has no skill %q (it has %s)", v.name, skill, strings.Join(v.caps, ", ")).
			withReachCode(streams.CodeBadRequest)
	case skill != "":
		return skill, nil
	case v.name == "":
		return "", rpcError(CodeInvalidParams, "name the skill (a capability) in metadata.skill, or send to /a2a/{type}").
			withReachCode(streams.CodeBadRequest)
	case len(v.caps) != 1:
		return "", rpcError(CodeInvalidParams, "agent type %s has %d skills (%s): name one in metadata.skill", v.name, len(v.caps),
			strings.Join(v.caps, ", ")).withReachCode(streams.CodeBadRequest)
	}
	return v.caps[0], nil
}

func now() time.Time { return time.Now().UTC() }

// StateOf maps a reply's error code to a task state: none COMPLETED,
// BIZ_REJECT REJECTED, UNAUTHORIZED AUTH_REQUIRED, CANCELLED CANCELED,
// any other FAILED.
func StateOf(code streams.Code) TaskState {
	switch code {
	case "":
		return StateCompleted
	case streams.CodeBizReject:
		return StateRejected
	case streams.CodeUnauthorized:
		return StateAuthRequired
	case streams.CodeCancelled:
		return StateCanceled
	}
	return StateFailed
}

// taskOf returns t ended by reply: its result as an artifact, or its
// error in the status message.
func taskOf(t Task, reply *nats.Msg) Task {
	code := streams.Code(reply.Header.Get(streams.HeaderError))
	t.Status = TaskStatus{State: StateOf(code), Timestamp: now()}
	meta := *t.Metadata // a copy: t's is shared with the stored task
	meta.AgentReach.Node = reply.Header.Get(streams.HeaderNode)
	t.Metadata = &meta
	if code == "" {
		t.Artifacts = []Artifact{{ArtifactID: "result", Name: "result", Parts: []Part{resultPart(reply)}}}
		return t
	}
	meta.AgentReach.Code = string(code)
	text := string(code) + ": " + failureText(reply)
	data, _ := json.Marshal(map[string]string{"code": string(code), "message": failureText(reply)})
	t.Status.Message = &Message{MessageID: t.ID + "-status", ContextID: t.ContextID, TaskID: t.ID, Role: RoleAgent,
		Parts: []Part{{Text: &text}, {Data: data}}}
	return t
}

// failureText is the message of an error reply.
func failureText(reply *nats.Msg) string {
	if e := streams.ErrorFromMessage(reply); e != nil {
		return e.Message
	}
	return reply.Header.Get(streams.HeaderLastError)
}

// resultPart is a result as a part: a data part when it is JSON (or
// msgpack, converted), else text, else raw bytes.
func resultPart(reply *nats.Msg) Part {
	ct := streams.ContentType(reply.Header, reply.Data)
	if ct == streams.ContentTypeJSON && json.Valid(reply.Data) {
		return Part{Data: reply.Data, MediaType: streams.ContentTypeJSON}
	}
	if ct == streams.ContentTypeMsgpack {
		var v any
		if streams.Decode(ct, reply.Data, &v) == nil {
			if b, err := json.Marshal(v); err == nil {
				return Part{Data: b, MediaType: streams.ContentTypeJSON}
			}
		}
	}
	if utf8.Valid(reply.Data) {
		text := string(reply.Data)
		return Part{Text: &text, MediaType: "text/plain"}
	}
	return Part{Raw: reply.Data, MediaType: ct}
}

// getTask is GetTask: a task of the caller's, as last seen.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request, req Request) {
	var p GetTaskRequest
	if e := decodeParams(req.Params, &p); e != nil {
		writeRPC(w, req.ID, nil, e)
		return
	}
	caller, ok := s.caller(w, r)
	if !ok {
		return
	}
	t, _, _, found := s.tasks.get(caller, p.ID)
	if !found {
		writeRPC(w, req.ID, nil, rpcError(CodeTaskNotFound, "no task %q of this caller (tasks are kept by the gateway replica that ran them, %d at most)", p.ID, s.cfg.MaxTasks))
		return
	}
	writeRPC(w, req.ID, t, nil)
}

// cancelTask is CancelTask: a task of the caller's still running is
// cancelled as reach.cancel does (its instance gets a CANCEL); one that
// ended cannot be.
func (s *Server) cancelTask(w http.ResponseWriter, r *http.Request, req Request) {
	var p CancelTaskRequest
	if e := decodeParams(req.Params, &p); e != nil {
		writeRPC(w, req.ID, nil, e)
		return
	}
	caller, ok := s.caller(w, r)
	if !ok {
		return
	}
	t, cancel, done, found := s.tasks.get(caller, p.ID)
	switch {
	case !found:
		writeRPC(w, req.ID, nil, rpcError(CodeTaskNotFound, "no task %q of this caller", p.ID))
		return
	case t.Status.State.Terminal() || cancel == nil:
		writeRPC(w, req.ID, nil, rpcError(CodeTaskNotCancelable, "task %q has ended (%s)", p.ID, t.Status.State))
		return
	}
	cancel()
	// The task ends CANCELLED as soon as the dispatcher takes it back;
	// the answer waits for that (at most cancelWait: then it is the task
	// as it is, still WORKING).
	wait := time.NewTimer(cancelWait)
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
	case <-r.Context().Done():
	}
	if latest, _, _, ok := s.tasks.get(caller, p.ID); ok {
		t = latest
	}
	writeRPC(w, req.ID, t, nil)
}

// cancelWait bounds how long CancelTask waits for the task to end.
const cancelWait = 5 * time.Second

// listTasks is ListTasks: the caller's tasks, newest first, filtered by
// context and state, paged by pageSize (at most 100) and pageToken.
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request, req Request) {
	var p ListTasksRequest
	if e := decodeParams(req.Params, &p); e != nil {
		writeRPC(w, req.ID, nil, e)
		return
	}
	size := int32(50)
	if p.PageSize != nil {
		size = *p.PageSize
	}
	if size < 1 || size > 100 {
		writeRPC(w, req.ID, nil, rpcError(CodeInvalidParams, "pageSize must be between 1 and 100, got %d", size))
		return
	}
	offset := 0
	if p.PageToken != "" {
		if _, err := fmt.Sscanf(p.PageToken, "%d", &offset); err != nil || offset < 0 {
			writeRPC(w, req.ID, nil, rpcError(CodeInvalidParams, "pageToken %q is not one this server gave", p.PageToken))
			return
		}
	}
	caller, ok := s.caller(w, r)
	if !ok {
		return
	}
	all := s.tasks.list(caller, func(t *Task) bool {
		return (p.ContextID == "" || t.ContextID == p.ContextID) &&
			(p.Status == "" || p.Status == "TASK_STATE_UNSPECIFIED" || t.Status.State == p.Status) &&
			(p.StatusTimestampAfter == nil || t.Status.Timestamp.After(*p.StatusTimestampAfter))
	})
	out := ListTasksResponse{Tasks: []Task{}, PageSize: size, TotalSize: int32(len(all))}
	if offset < len(all) {
		end := min(offset+int(size), len(all))
		out.Tasks = all[offset:end]
		if end < len(all) {
			out.NextPageToken = fmt.Sprint(end)
		}
	}
	if p.IncludeArtifacts == nil || !*p.IncludeArtifacts {
		for i := range out.Tasks {
			out.Tasks[i].Artifacts = nil
		}
	}
	writeRPC(w, req.ID, out, nil)
}
