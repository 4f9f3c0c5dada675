package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// StatusClientClosed is the status of a call whose client went away before
// its answer (CANCELLED); nobody reads it, but the access log does.
const StatusClientClosed = 499

// Status returns the HTTP status of an error code:
//
//	BAD_REQUEST 400, UNAUTHORIZED 403 (401 without credentials), NO_AGENT 404,
//	PAYLOAD_TOO_LARGE 413, BIZ_REJECT 422, TARGET_BUSY 429, INTERNAL 500,
//	INCOMPLETE 502 (the body is still the aggregate), OVERLOADED 503,
//	CIRCUIT_OPEN 503, TIMEOUT 504, DEADLINE_EXCEEDED 504, LOOP_DETECTED 508,
//	CANCELLED 499, NOT_FOUND 404, METHOD_NOT_ALLOWED 405; any other 502.
func Status(code streams.Code) int {
	switch code {
	case "":
		return http.StatusOK
	case streams.CodeBadRequest:
		return http.StatusBadRequest
	case streams.CodeUnauthorized:
		return http.StatusForbidden
	case streams.CodeNoAgent, CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case streams.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case streams.CodeBizReject:
		return http.StatusUnprocessableEntity
	case streams.CodeTargetBusy:
		return http.StatusTooManyRequests
	case streams.CodeInternal:
		return http.StatusInternalServerError
	case streams.CodeOverloaded, streams.CodeCircuitOpen:
		return http.StatusServiceUnavailable
	case streams.CodeTimeout, streams.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case streams.CodeLoopDetected:
		return http.StatusLoopDetected
	case streams.CodeCancelled:
		return StatusClientClosed
	}
	return http.StatusBadGateway // INCOMPLETE, and codes this gateway does not know
}

// retryAfter is the Retry-After, in seconds, of codes a client may simply
// send again.
func retryAfter(code streams.Code) string {
	switch code {
	case streams.CodeTargetBusy, streams.CodeOverloaded, streams.CodeCircuitOpen:
		return "1"
	}
	return ""
}

// writeError answers e as JSON {"code", "message"} (and "excluded" when it
// has them) with its status.
func writeError(w http.ResponseWriter, r *http.Request, e *streams.Error) {
	status := Status(e.Code)
	if e.Code == streams.CodeUnauthorized && r.Header.Get("Authorization") == "" {
		status = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentreach"`)
	}
	if s := retryAfter(e.Code); s != "" {
		w.Header().Set("Retry-After", s)
	}
	writeJSON(w, status, e)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"INTERNAL","message":"response not encodable"}`)
	}
	w.Header().Set("Content-Type", streams.ContentTypeJSON)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeReply answers a task's reply: its Reach-* headers as response headers, its
// body as the response body, the status of its error code. An error reply
// whose body is {"code","message"} in msgpack is answered in JSON; an
// aggregate (INCOMPLETE) keeps its body.
func writeReply(w http.ResponseWriter, r *http.Request, reply *nats.Msg) {
	for k, vs := range reply.Header {
		if !strings.HasPrefix(k, "Reach-") { // not Content-Type (set below) nor NATS's own (Nats-Msg-Id)
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	code := streams.Code(reply.Header.Get(streams.HeaderError))
	ct := streams.ContentType(reply.Header, reply.Data)
	if code != "" && code != streams.CodeIncomplete {
		e := streams.ErrorFromMessage(reply)
		if e == nil {
			e = streams.NewError(code, "%s", reply.Header.Get(streams.HeaderLastError))
		}
		writeError(w, r, e)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(reply.Data)))
	w.WriteHeader(Status(code))
	_, _ = w.Write(reply.Data)
}
