package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/agent-reach/agentreach/streams"
)

// JSON-RPC 2.0 and A2A 1.0 error codes.
const (
	CodeParseError             = -32700 // the body is not JSON
	CodeInvalidRequest         = -32600 // not a JSON-RPC 2.0 request
	CodeMethodNotFound         = -32601
	CodeInvalidParams          = -32602 // also a Reach BAD_REQUEST
	CodeInternalError          = -32603
	CodeTaskNotFound           = -32001
	CodeTaskNotCancelable      = -32002
	CodePushNotSupported       = -32003
	CodeUnsupportedOperation   = -32004
	CodeContentTypeUnsupported = -32005
	CodeVersionNotSupported    = -32009
)

// The methods served.
const (
	MethodSendMessage          = "SendMessage"
	MethodSendStreamingMessage = "SendStreamingMessage"
	MethodGetTask              = "GetTask"
	MethodListTasks            = "ListTasks"
	MethodCancelTask           = "CancelTask"
)

// Request is a decoded JSON-RPC 2.0 request.
type Request struct {
	// ID is the request's id as sent: a JSON string or number.
	ID     json.RawMessage
	Method string
	Params json.RawMessage
}

// RPCError is a JSON-RPC error object. Data, when set, is a list holding a
// google.rpc.ErrorInfo with the Reach code, the form A2A clients read.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    []any  `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

func rpcError(code int, format string, args ...any) *RPCError {
	return &RPCError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// errorInfo is the google.rpc.ErrorInfo of a Reach code.
func (e *RPCError) withReachCode(c streams.Code) *RPCError {
	e.Data = []any{map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
		"reason": string(c), "domain": "agentreach", "metadata": map[string]string{"code": string(c)}}}
	return e
}

// response is a JSON-RPC 2.0 response: result or error.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// DecodeRequest reads a JSON-RPC 2.0 request. A body that is not JSON is
// CodeParseError; one that is JSON but not a single request object with
// "jsonrpc": "2.0", a string "method" and a string or number "id" is
// CodeInvalidRequest (a batch too: A2A sends none). params, when present,
// must be an object. The id is returned whenever it could be read, for
// the error response.
func DecodeRequest(body []byte) (Request, *RPCError) {
	var req Request
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		if !json.Valid(body) {
			return req, rpcError(CodeParseError, "the body is not JSON")
		}
		return req, rpcError(CodeInvalidRequest, "the body is not a JSON-RPC request object (batches are not served)")
	}
	var raw struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  *string         `json:"method"`
		Params  json.RawMessage `json:"params"`
	}
	// Unmarshal checks the whole body is JSON before it decodes anything.
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return req, rpcError(CodeParseError, "the body is not JSON: %v", err)
		}
		return req, rpcError(CodeInvalidRequest, "the request object: %v", err)
	}
	switch id := bytes.TrimSpace(raw.ID); {
	case len(id) == 0 || string(id) == "null":
		return req, rpcError(CodeInvalidRequest, "id is missing: every A2A method expects an answer")
	case id[0] == '"' || id[0] == '-' || (id[0] >= '0' && id[0] <= '9'):
		req.ID = id
	default:
		return req, rpcError(CodeInvalidRequest, "id must be a string or a number")
	}
	switch {
	case raw.JSONRPC == nil || *raw.JSONRPC != "2.0":
		return req, rpcError(CodeInvalidRequest, `jsonrpc must be "2.0"`)
	case raw.Method == nil || *raw.Method == "":
		return req, rpcError(CodeInvalidRequest, "method is missing")
	case !utf8.ValidString(*raw.Method) || len(*raw.Method) > 128:
		return req, rpcError(CodeInvalidRequest, "method is not a method name")
	}
	req.Method = *raw.Method
	if p := bytes.TrimSpace(raw.Params); len(p) > 0 && string(p) != "null" {
		if p[0] != '{' {
			return req, rpcError(CodeInvalidParams, "params must be an object")
		}
		req.Params = p
	}
	return req, nil
}

// decodeParams reads params into v: unknown fields are allowed (later
// minor versions add some), wrong types are CodeInvalidParams.
func decodeParams(params json.RawMessage, v any) *RPCError {
	if len(params) == 0 {
		params = []byte("{}")
	}
	if err := json.Unmarshal(params, v); err != nil {
		return rpcError(CodeInvalidParams, "params: %v", err)
	}
	return nil
}

// payloadOf returns the task payload of a message: its first data part's
// value, else its first text part as {"text": …}. A message with neither
// is refused as BAD_REQUEST (CodeInvalidParams).
func payloadOf(m *Message) ([]byte, *RPCError) {
	if m == nil {
		return nil, rpcError(CodeInvalidParams, "params.message is missing").withReachCode(streams.CodeBadRequest)
	}
	for _, p := range m.Parts {
		if d := bytes.TrimSpace(p.Data); len(d) > 0 && string(d) != "null" {
			return d, nil
		}
	}
	for _, p := range m.Parts {
		if p.Text != nil {
			b, _ := json.Marshal(map[string]string{"text": *p.Text})
			return b, nil
		}
	}
	return nil, rpcError(CodeInvalidParams, "the message has no data part and no text part: nothing to send as the payload").
		withReachCode(streams.CodeBadRequest)
}
