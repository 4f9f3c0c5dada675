package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// Relay serves on t (stdio) the tools of the MCP endpoint at url (a
// gateway's /mcp) as its client sees them: with hc adding a bearer token,
// the tools of that identity under the ACL. The list follows the
// endpoint's tools/list_changed; a call is forwarded, its cancellation
// too. It returns when t's client leaves or ctx ends. It is how a desktop
// client reaches the tools as a caller identity, which may not read the
// registry itself (`agentreach mcp --url`).
func Relay(ctx context.Context, url string, hc *http.Client, t sdk.Transport, version string, log zerolog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	client := sdk.NewClient(&sdk.Implementation{Name: DefaultName + "-relay", Version: version}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer func() { _ = cs.Close() }()
	srv := sdk.NewServer(&sdk.Implementation{Name: DefaultName, Version: version}, &sdk.ServerOptions{
		HasTools:     true,
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	r := &relay{cs: cs, srv: srv, held: map[string]string{}, log: log}
	if err := r.sync(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				if err := r.sync(ctx); err != nil && ctx.Err() == nil {
					log.Warn().Err(err).Msg("mcp relay: listing the tools")
				}
			}
		}
	}()
	err = srv.Run(ctx, t)
	cancel()
	wg.Wait()
	return err
}

// relay holds the tools a Relay serves.
type relay struct {
	cs   *sdk.ClientSession
	srv  *sdk.Server
	log  zerolog.Logger
	held map[string]string // tool name → its JSON, as served
}

// sync lists the endpoint's tools and serves exactly those.
func (r *relay) sync(ctx context.Context) error {
	seen := map[string]bool{}
	for tool, err := range r.cs.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		seen[tool.Name] = true
		b, err := json.Marshal(tool)
		if err != nil || r.held[tool.Name] == string(b) {
			continue
		}
		if err := addTool(r.srv, tool, r.forward(tool.Name)); err != nil {
			r.log.Warn().Err(err).Str("tool", tool.Name).Msg("mcp relay: tool not served")
			continue
		}
		r.held[tool.Name] = string(b)
	}
	var gone []string
	for name := range r.held {
		if !seen[name] {
			gone = append(gone, name)
			delete(r.held, name)
		}
	}
	if len(gone) > 0 {
		r.srv.RemoveTools(gone...)
	}
	return nil
}

// forward calls tool name at the endpoint with the request's arguments
// and _meta; the request's cancellation cancels it there.
func (r *relay) forward(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		p := &sdk.CallToolParams{Name: name}
		for k, v := range req.Params.Meta { // Agent-Reach's keys only: the protocol's are each session's own
			if strings.HasPrefix(k, "io.agentreach/") {
				if p.Meta == nil {
					p.Meta = sdk.Meta{}
				}
				p.Meta[k] = v
			}
		}
		if len(req.Params.Arguments) > 0 {
			p.Arguments = json.RawMessage(req.Params.Arguments)
		}
		res, err := r.cs.CallTool(ctx, p)
		if err != nil {
			return nil, err
		}
		return res, nil
	}
}
