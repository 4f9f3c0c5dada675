package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// The _meta keys of a tools/call that set the task's request id and
// idempotency key (docs/mcp.md): the same rules as the Reach-Request-Id
// and Reach-Idempotency-Key headers of POST /v1/call.
const (
	MetaRequestID      = "io.agentreach/request-id"
	MetaIdempotencyKey = "io.agentreach/idempotency-key"
)

// callHandler is the tools/call handler of capability in v: a task routed
// through the source as v's caller; with a progress token, as a stream
// whose chunks are sent as notifications/progress. Every failure is a tool result with
// isError and the Reach code in its text, never a protocol error.
func (s *Server) callHandler(v *view, capability string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		if ex := req.Extra; ex != nil && ex.TokenInfo != nil && ex.TokenInfo.UserID != v.caller {
			return errorResult(streams.NewError(streams.CodeUnauthorized, "this session belongs to another identity")), nil
		}
		task, e := taskOf(req.Params)
		if e != nil {
			return errorResult(e), nil
		}
		if v.caller != "" {
			task.Header.Set(streams.HeaderSource, v.caller)
		}
		ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
		if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
			if st, ok := s.src.(Streamer); ok {
				return streamCall(ctx, st, req.Session, token, capability, task), nil
			}
		}
		return resultOf(s.src.Call(ctx, capability, task)), nil
	}
}

// taskOf builds the task of a tools/call: the arguments as the JSON body
// ({} when absent), and the request id and idempotency key its _meta
// gives.
func taskOf(p *sdk.CallToolParamsRaw) (*nats.Msg, *streams.Error) {
	args := bytes.TrimSpace(p.Arguments)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	if args[0] != '{' || !json.Valid(args) {
		return nil, streams.NewError(streams.CodeBadRequest, "arguments: want a JSON object")
	}
	m := &nats.Msg{Header: nats.Header{}, Data: args}
	m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	for key, header := range map[string]string{MetaRequestID: streams.HeaderRequestID, MetaIdempotencyKey: streams.HeaderIdempotencyKey} {
		raw, ok := p.Meta[key]
		if !ok {
			continue
		}
		val, isString := raw.(string)
		if !isString || streams.ValidateInstanceID(val) != nil {
			return nil, streams.NewError(streams.CodeBadRequest, "_meta %q: want a string of letters, digits, '_' and '-'", key)
		}
		m.Header.Set(header, val)
	}
	return m, nil
}

// resultOf turns a dispatcher reply into a tool result: the result as
// text (JSON, or msgpack written as JSON) and, when it is a JSON object,
// as structuredContent; an error reply as isError with "CODE: message".
func resultOf(reply *nats.Msg) *sdk.CallToolResult {
	if e := streams.ErrorFromMessage(reply); e != nil {
		return errorResult(e)
	}
	ct := streams.ContentType(reply.Header, reply.Data)
	data := reply.Data
	if ct == streams.ContentTypeMsgpack {
		var v any
		if err := streams.Decode(ct, data, &v); err != nil {
			return errorResult(streams.NewError(streams.CodeInternal, "the result does not decode: %v", err))
		}
		b, err := json.Marshal(v)
		if err != nil {
			return errorResult(streams.NewError(streams.CodeInternal, "the result has no JSON form: %v", err))
		}
		data = b
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(data)}}}
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		res.StructuredContent = json.RawMessage(trimmed)
	}
	if id := reply.Header.Get(streams.HeaderRequestID); id != "" {
		res.Meta = sdk.Meta{MetaRequestID: id}
		if node := reply.Header.Get(streams.HeaderNode); node != "" {
			res.Meta["io.agentreach/node"] = node
		}
	}
	return res
}

// errorResult is the tool result of a failure.
func errorResult(e *streams.Error) *sdk.CallToolResult {
	text := string(e.Code)
	if e.Message != "" {
		text += ": " + e.Message
	}
	if len(e.Excluded) > 0 {
		parts := make([]string, len(e.Excluded))
		for i, x := range e.Excluded {
			parts[i] = x.Node + " (" + x.Reason + ")"
		}
		text += "; excluded: " + strings.Join(parts, ", ")
	}
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: text}},
		Meta: sdk.Meta{"io.agentreach/code": string(e.Code)}}
}

// sortTools orders tools by name: the deterministic order of tools/list.
func sortTools(ts []*sdk.Tool) {
	slices.SortFunc(ts, func(a, b *sdk.Tool) int { return strings.Compare(a.Name, b.Name) })
}
