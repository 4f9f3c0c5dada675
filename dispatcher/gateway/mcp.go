package gateway

import (
	"context"
	"net/http"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/gateway/mcp"
	"github.com/agent-reach/agentreach/streams"
)

// startMCP makes the MCP server of /mcp (docs/mcp.md): the dispatcher's
// routable capabilities as tools, filtered by the ACL when the gateway
// identifies its callers. It follows the routing table from the first
// request to /mcp until Shutdown.
func (g *Gateway) startMCP() {
	g.mcp = mcp.New(mcp.DispatcherSource(g.d, g.identifier != nil),
		mcp.Config{CallTimeout: g.cfg.WriteTimeout - writeSlack, MaxBody: g.cfg.MaxBody}, mcp.WithLogger(g.log))
}

// mcpHandler is /mcp: streamable HTTP, every caller named by the
// Identifier (its bearer token) on every request.
func (g *Gateway) mcpHandler() http.Handler {
	var identify mcp.Identify
	if g.identifier != nil {
		identify = func(r *http.Request) (string, *streams.Error) {
			m := &nats.Msg{Header: nats.Header{}}
			if e := g.identifier.Identify(r, m); e != nil {
				return "", e
			}
			return m.Header.Get(streams.HeaderSource), nil
		}
	}
	h := g.mcp.Handler(identify)
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { g.mcp.Start(context.Background()) })
		h.ServeHTTP(w, r)
	})
}

// MCP returns the MCP server behind /mcp.
func (g *Gateway) MCP() *mcp.Server { return g.mcp }
