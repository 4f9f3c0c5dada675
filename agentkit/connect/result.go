package connect

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/streams"
)

// toolResult turns a tool's result into the task's result, as JSON: its
// structuredContent when present, else its text (JSON when it parses, else
// {"text": …}; several text blocks are joined with newlines), else
// {"content": […]} with the non-text blocks as the server sent them. An
// isError result is a failure: BIZ_REJECT with the text, or the Reach code
// the text starts with ("TARGET_BUSY: …", as an Agent-Reach MCP server
// writes its errors).
func toolResult(res *mcp.CallToolResult) (json.RawMessage, error) {
	if res == nil {
		return nil, streams.NewError(streams.CodeInternal, "the tool returned no result")
	}
	text, hasText := joinText(res.Content)
	if res.IsError {
		return nil, toolError(text)
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, streams.NewError(streams.CodeInternal, "structuredContent: %v", err)
		}
		return b, nil
	}
	if hasText {
		return textResult(text), nil
	}
	b, err := json.Marshal(struct {
		Content []mcp.Content `json:"content"`
	}{nonNil(res.Content)})
	if err != nil {
		return nil, streams.NewError(streams.CodeInternal, "content: %v", err)
	}
	return b, nil
}

func nonNil(c []mcp.Content) []mcp.Content {
	if c == nil {
		return []mcp.Content{}
	}
	return c
}

// textResult is text as JSON when it is one JSON value, else {"text": text}.
func textResult(text string) json.RawMessage {
	t := bytes.TrimSpace([]byte(text))
	if len(t) > 0 && json.Valid(t) {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(map[string]string{"text": text})
	return b
}

func joinText(content []mcp.Content) (string, bool) {
	var parts []string
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n"), len(parts) > 0
}

// toolError is the failure of an isError result with text.
func toolError(text string) error {
	if text == "" {
		text = "the tool reported an error"
	}
	if i := strings.IndexByte(text, ':'); i > 0 {
		code := streams.Code(text[:i])
		for _, c := range streams.Codes() {
			if c == code {
				return &streams.Error{Code: code, Message: strings.TrimSpace(text[i+1:])}
			}
		}
	}
	return &streams.Error{Code: streams.CodeBizReject, Message: text}
}

// callError maps an error of tools/call that is not a tool result: invalid
// params → BAD_REQUEST, another JSON-RPC error → INTERNAL, a lost
// connection → TARGET_BUSY when the tool may be repeated (read-only or
// idempotent), else INTERNAL (it may have run). The context's own end is
// left for agentkit to classify.
func callError(err error, repeatable bool) (e error, lost bool) {
	var rpc *jsonrpc.Error
	switch {
	case errors.As(err, &rpc):
		if rpc.Code == jsonrpc.CodeInvalidParams {
			return streams.NewError(streams.CodeBadRequest, "%s", rpc.Message), false
		}
		return streams.NewError(streams.CodeInternal, "upstream error %d: %s", rpc.Code, rpc.Message), false
	case isContextErr(err):
		return err, false
	case repeatable:
		return streams.NewError(streams.CodeTargetBusy, "upstream unreachable: %v", err), true
	default:
		return streams.NewError(streams.CodeInternal, "upstream unreachable: %v", err), true
	}
}
