package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/streams"
)

// Identify names the caller of an HTTP request (its bearer token's
// identity), or refuses it with UNAUTHORIZED or BAD_REQUEST.
type Identify func(r *http.Request) (string, *streams.Error)

// httpHandler is the streamable HTTP side: both revisions on one path.
type httpHandler struct {
	s         *Server
	identify  Identify
	stateful  *sdk.StreamableHTTPHandler
	stateless *sdk.StreamableHTTPHandler
	handler   http.Handler
}

// callerKey carries the identified caller in a request's context.
type callerKey struct{}

// Handler returns the streamable HTTP endpoint (mount it at /mcp). With
// identify, every request must name its caller (a bearer token), checked
// on each request; a session of the 2025-11-25 revision stays bound to
// the identity that opened it. Without, every request is the anonymous
// caller and sees every tool.
//
// Both revisions share the path (DESIGN §16): a request of the
// session-based revision — initialize, one carrying Mcp-Session-Id, GET
// and DELETE — goes to a stateful handler; the rest (2026-07-28: discover,
// subscriptions/listen, tools/list, tools/call) to a stateless one.
func (s *Server) Handler(identify Identify) http.Handler {
	s.httpOnce.Do(func() {
		h := &httpHandler{s: s, identify: identify}
		getServer := func(r *http.Request) *sdk.Server {
			caller, _ := r.Context().Value(callerKey{}).(string)
			if v := s.view(caller); v != nil {
				return v.srv
			}
			return nil
		}
		h.stateful = sdk.NewStreamableHTTPHandler(getServer, &sdk.StreamableHTTPOptions{
			SessionTimeout:             s.cfg.SessionTimeout,
			MaxRequestBodyBytes:        s.cfg.MaxBody,
			DisableLocalhostProtection: true, // the gateway checks Host itself (Config.Hosts)
		})
		h.stateless = sdk.NewStreamableHTTPHandler(getServer, &sdk.StreamableHTTPOptions{
			Stateless:                    true,
			PropagateRequestCancellation: true,
			MaxRequestBodyBytes:          s.cfg.MaxBody,
			DisableLocalhostProtection:   true,
		})
		var inner http.Handler = http.HandlerFunc(h.route)
		if identify != nil {
			inner = auth.RequireBearerToken(h.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(inner)
		}
		h.handler = http.NewCrossOriginProtection().Handler(inner)
		s.http = h
	})
	return s.http.handler
}

// verify is the bearer check: the identity becomes the session's user.
func (h *httpHandler) verify(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
	caller, e := h.identify(r)
	if e != nil {
		return nil, errors.Join(auth.ErrInvalidToken, e)
	}
	return &auth.TokenInfo{UserID: caller}, nil
}

// route sends r to the stateful or the stateless handler.
func (h *httpHandler) route(w http.ResponseWriter, r *http.Request) {
	caller := ""
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		caller = ti.UserID
	}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, caller))
	if r.Method != http.MethodPost {
		if r.Method == http.MethodGet {
			endless(w) // the notification stream outlives any write timeout
		}
		h.stateful.ServeHTTP(w, r)
		return
	}
	if r.Header.Get("Mcp-Session-Id") != "" {
		h.stateful.ServeHTTP(w, r)
		return
	}
	limit := h.s.cfg.MaxBody
	if limit <= 0 {
		limit = sdk.DefaultMaxRequestBodyBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		http.Error(w, fmt.Sprintf("the body is more than %d bytes", limit), http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	env, ok := envelope(body)
	if !ok {
		env = rpcRequest{} // the SDK answers what does not parse
	}
	switch env.Method {
	case "initialize":
		h.stateful.ServeHTTP(w, r)
	case "subscriptions/listen":
		endless(w)
		h.stateless.ServeHTTP(w, r)
	case "tools/call":
		if !h.fastCall(w, r, env, caller) {
			h.stateless.ServeHTTP(w, r)
		}
	default:
		h.stateless.ServeHTTP(w, r)
	}
}

// rpcRequest is the envelope of a JSON-RPC request.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// envelope reads a request body's JSON-RPC envelope (zero when it is none).
func envelope(body []byte) (rpcRequest, bool) {
	var req rpcRequest
	err := json.Unmarshal(body, &req)
	return req, err == nil
}

// endless lifts the HTTP server's write deadline from a response that is a
// long-lived notification stream.
func endless(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
}
