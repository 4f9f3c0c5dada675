package mcp

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// statelessRevision is the protocol revision of one request per call.
const statelessRevision = "2026-07-28"

// fastCall answers a well-formed tools/call of the stateless revision of a
// tool the caller holds: the same handler the SDK would run, answered as
// application/json. The SDK's stateless path sets up a session per request
// and decodes the body about six times (each decode allocating 32 KiB),
// which costs several times the call itself (BENCHMARKS.md, mcp); a
// tools/call is most of an agent's traffic. Anything else — another
// method or revision, a header that does not mirror the body, a missing
// _meta key, a progress token (its chunks go as notifications on an
// event stream), an unknown tool, input responses — reports false and is
// left to the SDK, which answers it (or its error) as the protocol says.
func (h *httpHandler) fastCall(w http.ResponseWriter, r *http.Request, req rpcRequest, caller string) bool {
	if r.Header.Get("Mcp-Protocol-Version") != statelessRevision || r.Header.Get("Mcp-Method") != "tools/call" {
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	if jsonOK, streamOK := accepts(r.Header.Values("Accept")); !jsonOK || !streamOK {
		return false
	}
	if req.JSONRPC != "2.0" || req.Method != "tools/call" || !validID(req.ID) {
		return false
	}
	var params sdk.CallToolParamsRaw
	if json.Unmarshal(req.Params, &params) != nil || params.Name == "" || r.Header.Get("Mcp-Name") != params.Name ||
		len(params.InputResponses) > 0 || params.RequestState != "" || params.GetProgressToken() != nil {
		return false
	}
	if params.Meta[sdk.MetaKeyProtocolVersion] != statelessRevision {
		return false
	}
	if caps, ok := params.Meta[sdk.MetaKeyClientCapabilities].(map[string]any); !ok || caps == nil {
		return false
	}
	v := h.s.view(caller)
	if v == nil {
		return false
	}
	v.mu.RLock()
	t, ok := v.tools[params.Name]
	v.mu.RUnlock()
	if !ok {
		return false
	}
	creq := &sdk.CallToolRequest{Params: &params, Extra: &sdk.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: r.Header}}
	res, err := h.s.callHandler(v, t.capability)(r.Context(), creq)
	if err != nil || res == nil {
		return false // never: the handler answers every failure as a result
	}
	if res.Meta == nil {
		res.Meta = sdk.Meta{}
	}
	res.Meta[sdk.MetaKeyServerInfo] = &sdk.Implementation{Name: h.s.cfg.Name, Version: h.s.cfg.Version}
	out, err := json.Marshal(res)
	if err != nil || len(out) < 2 || out[len(out)-1] != '}' {
		return false
	}
	var b bytes.Buffer
	b.Grow(len(out) + len(req.ID) + 64)
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(req.ID)
	b.WriteString(`,"result":`)
	b.Write(out[:len(out)-1])
	b.WriteString(`,"resultType":"complete"}}`)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
	return true
}

// validID reports whether raw is a JSON-RPC request id: a string or a
// number.
func validID(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	case c == '-' || c >= '0' && c <= '9':
		var n json.Number
		return json.Unmarshal(raw, &n) == nil
	}
	return false
}

// accepts reports whether Accept values take JSON and event streams (the
// transport requires a client to accept both).
func accepts(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for _, raw := range strings.Split(value, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(raw), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}
