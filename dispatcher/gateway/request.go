package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/textproto"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// formType is curl -d's default Content-Type.
const formType = "application/x-www-form-urlencoded"

// HeaderTraceState is W3C trace context's vendor part, passed on with
// traceparent.
const HeaderTraceState = "tracestate"

// passed maps the canonical HTTP name of each request header that travels
// to the task to its name on the wire: the caller's headers of the
// protocol (docs/protocol.md, "Calling a capability"). Others are not
// passed on.
var passed = func() map[string]string {
	m := make(map[string]string)
	for _, h := range []string{streams.HeaderRequestID, streams.HeaderOrchestrationID, streams.HeaderAgent,
		streams.HeaderTimeout, streams.HeaderDeadline, streams.HeaderIdempotencyKey, streams.HeaderAffinityKey,
		streams.HeaderBudget, streams.HeaderSource, streams.HeaderRequire, streams.HeaderPrefer, streams.HeaderHops,
		streams.HeaderVisits, streams.HeaderQuorum, streams.HeaderTraceParent, HeaderTraceState} {
		m[textproto.CanonicalMIMEHeaderKey(h)] = h
	}
	return m
}()

// failure is an error answer with the HTTP status it gets when that is
// not its code's (Status).
type failure struct {
	status int // 0: Status(e.Code)
	e      *streams.Error
}

func fail(status int, code streams.Code, format string, args ...any) *failure {
	return &failure{status: status, e: streams.NewError(code, format, args...)}
}

// taskHeader returns the wire headers of an HTTP request's task.
func taskHeader(h http.Header) nats.Header {
	out := nats.Header{}
	for k, vs := range h {
		if name, ok := passed[k]; ok && len(vs) > 0 {
			out.Set(name, vs[0])
		}
	}
	return out
}

// contentType returns the wire content type of an HTTP Content-Type: ""
// when none is given (the body's own form decides, as on NATS), and for
// application/x-www-form-urlencoded, which curl -d sends unless told
// otherwise: a body that is JSON is then JSON.
func contentType(v string) (string, *failure) {
	if v == "" {
		return "", nil
	}
	mt, _, err := mime.ParseMediaType(v)
	switch {
	case err == nil && mt == formType:
		return "", nil
	case err != nil:
		return "", fail(http.StatusUnsupportedMediaType, streams.CodeBadRequest, "Content-Type %q: %v", v, err)
	case mt == streams.ContentTypeJSON:
		return streams.ContentTypeJSON, nil
	case mt == streams.ContentTypeMsgpack || mt == "application/x-msgpack":
		return streams.ContentTypeMsgpack, nil
	}
	return "", fail(http.StatusUnsupportedMediaType, streams.CodeBadRequest,
		"Content-Type %q: want application/json or application/msgpack", v)
}

// readBody reads at most limit bytes of body.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *failure) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil:
		return b, nil
	case errors.As(err, &tooBig):
		return nil, fail(0, streams.CodePayloadTooLarge, "the body is more than the server's max_payload of %d bytes", limit)
	case errors.As(err, &ne) && ne.Timeout():
		return nil, fail(http.StatusRequestTimeout, streams.CodeTimeout, "the body did not arrive in time: %v", err)
	}
	return nil, fail(http.StatusBadRequest, streams.CodeBadRequest, "reading the body: %v", err)
}

// readTask reads an HTTP request into the task message for capability:
// the body (at most limit bytes) with its content type, and the headers
// that travel.
func readTask(w http.ResponseWriter, r *http.Request, capability string, limit int64) (*nats.Msg, *failure) {
	if err := streams.ValidateCapability(capability); err != nil {
		return nil, fail(0, streams.CodeBadRequest, "capability in the path: %v", err)
	}
	ct, f := contentType(r.Header.Get("Content-Type"))
	if f != nil {
		return nil, f
	}
	body, f := readBody(w, r, limit)
	if f != nil {
		return nil, f
	}
	return taskMsg(r.Header, ct, body), nil
}

// taskMsg builds a task message of body in ct ("": sniffed) with the
// passed headers of h.
func taskMsg(h http.Header, ct string, body []byte) *nats.Msg {
	m := &nats.Msg{Header: taskHeader(h), Data: body}
	if ct != "" {
		m.Header.Set(streams.HeaderContentType, ct)
	}
	return m
}

// RouteRequest is the body of POST /route: the seeds' name for a call.
type RouteRequest struct {
	Capability string          `json:"capability"`
	Payload    json.RawMessage `json:"payload"`
}

// DecodeRoute reads a POST /route body: JSON {"capability", "payload"}
// with a valid capability, no other field, and any JSON value as payload
// ({} when absent). A refusal is BAD_REQUEST naming what is wrong.
func DecodeRoute(body []byte) (RouteRequest, *streams.Error) {
	var req RouteRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, streams.NewError(streams.CodeBadRequest, "route request: %v", describeJSON(err))
	}
	if dec.More() {
		return req, streams.NewError(streams.CodeBadRequest, "route request: more than one JSON value")
	}
	if req.Capability == "" {
		return req, streams.NewError(streams.CodeBadRequest, "route request: capability is missing")
	}
	if err := streams.ValidateCapability(req.Capability); err != nil {
		return req, streams.NewError(streams.CodeBadRequest, "route request: capability: %v", err)
	}
	if len(req.Payload) == 0 || string(req.Payload) == "null" {
		req.Payload = json.RawMessage("{}")
	}
	return req, nil
}

// describeJSON says where a JSON error is.
func describeJSON(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("malformed JSON at byte %d: %v", se.Offset, err)
	case errors.As(err, &te):
		return fmt.Errorf("field %q: want a %v, got JSON %s", te.Field, te.Type, te.Value)
	case errors.Is(err, io.EOF):
		return errors.New("the body is empty")
	}
	return err
}
