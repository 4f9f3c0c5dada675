package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// Relay serves on t (stdio) the tools of the MCP endpoint at url (a
// gateway's /mcp) as its client sees them: with hc adding a bearer token,
// the tools of that identity under the ACL. The list follows the
// endpoint's tools/list_changed; a call is forwarded, its cancellation
// and progress too. It returns when t's client leaves or ctx ends. It is how a desktop
// client reaches the tools as a caller identity, which may not read the
// registry itself (`agentreach mcp --url`).
func Relay(ctx context.Context, url string, hc *http.Client, t sdk.Transport, version string, log zerolog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	r := &relay{held: map[string]string{}, log: log}
	client := sdk.NewClient(&sdk.Implementation{Name: DefaultName + "-relay", Version: version}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: r.progressed,
	})
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer func() { _ = cs.Close() }()
	srv := sdk.NewServer(&sdk.Implementation{Name: DefaultName, Version: version}, &sdk.ServerOptions{
		HasTools:     true,
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	r.cs, r.srv = cs, srv
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
	// routes holds the calls in flight with a progress token: the token
	// sent to the endpoint → where its progress goes.
	routes sync.Map
	next   atomic.Uint64
}

// progressRoute is a forwarded call's progress: its client's session and
// token, and how many notifications have been passed on.
type progressRoute struct {
	ss    *sdk.ServerSession
	token any
	sent  atomic.Int64
	more  chan struct{} // told of each notification passed on
}

// progressed passes a notifications/progress of the endpoint on to the
// client whose call it belongs to, under that client's token. The SDK
// handles notifications one at a time in the order they came: the order
// is kept.
func (r *relay) progressed(ctx context.Context, req *sdk.ProgressNotificationClientRequest) {
	v, ok := r.routes.Load(req.Params.ProgressToken)
	if !ok {
		return
	}
	route := v.(*progressRoute)
	p := *req.Params
	p.Meta, p.ProgressToken = nil, route.token
	_ = route.ss.NotifyProgress(ctx, &p)
	route.sent.Add(1)
	select {
	case route.more <- struct{}{}:
	default:
	}
}

// wait returns once n notifications have been passed on, or ctx ends:
// the endpoint sends them before the result, but the SDK may hand over
// the result before it has handled them.
func (route *progressRoute) wait(ctx context.Context, n int64) {
	for route.sent.Load() < n {
		select {
		case <-route.more:
		case <-ctx.Done():
			return
		}
	}
}

// chunksOf reads MetaChunks of a result (a number after JSON).
func chunksOf(m sdk.Meta) int64 {
	switch n := m[MetaChunks].(type) {
	case float64:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
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
// and _meta; the request's cancellation cancels it there. A progress
// token is replaced by one of the relay's own, whose notifications are
// passed on under the caller's before the result.
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
		var route *progressRoute
		if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
			route = &progressRoute{ss: req.Session, token: token, more: make(chan struct{}, 1)}
			up := "relay-" + strconv.FormatUint(r.next.Add(1), 10)
			r.routes.Store(up, route)
			defer r.routes.Delete(up)
			p.SetProgressToken(up)
		}
		res, err := r.cs.CallTool(ctx, p)
		if err != nil {
			return nil, err
		}
		if route != nil {
			route.wait(ctx, chunksOf(res.Meta))
		}
		return res, nil
	}
}
