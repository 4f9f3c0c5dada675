package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/registry/policy"
)

// Defaults of Config.
const (
	DefaultName        = "agentreach"
	DefaultCallTimeout = 60 * time.Second
	// DefaultSessionTimeout closes a session of the 2025-11-25 revision
	// that sent no request for this long.
	DefaultSessionTimeout = 30 * time.Minute
)

// Config configures a Server. The zero value means all defaults.
type Config struct {
	// Name and Version are the server's implementation info; default
	// "agentreach" and "dev".
	Name, Version string
	// Instructions are sent to clients that ask.
	Instructions string
	// CallTimeout bounds one tools/call (the task's overall deadline is
	// its deadline at most); default DefaultCallTimeout.
	CallTimeout time.Duration
	// SessionTimeout closes an idle session of the session-based revision;
	// default DefaultSessionTimeout.
	SessionTimeout time.Duration
	// MaxBody bounds a request body over HTTP; default the SDK's 4 MiB.
	MaxBody int64
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the server's logger; the default discards.
func WithLogger(l zerolog.Logger) Option { return func(s *Server) { s.log = l } }

// Server serves the capabilities of a Source as MCP tools (docs/mcp.md):
// over streamable HTTP (Handler, both protocol revisions) and on any
// transport for one caller (Serve, used on stdio). Each caller sees its
// own tools — those the ACL lets it call — through an SDK server of its
// own (a view), which follows the source: a capability that appears or
// vanishes is added or removed, and the SDK pushes
// notifications/tools/list_changed to that caller's connected clients.
// Create it with New, Start it, Close it. Its methods are safe for
// concurrent use.
type Server struct {
	src Source
	cfg Config
	log zerolog.Logger

	mu    sync.Mutex
	views map[string]*view // caller → its view; "" is the anonymous caller (auth off)
	// ready holds the views made, for lookups without mu (every request
	// makes one).
	ready sync.Map // caller → *view
	snap  *snapshot
	// synced is closed and replaced after each pass of the watch loop
	// that changed some view (tests and benchmarks wait on it).
	synced chan struct{}
	closed bool

	http     *httpHandler // Handler's state; nil until first asked
	httpOnce sync.Once

	stop context.CancelFunc
	done chan struct{}
}

// snapshot is what the source offers at one moment, as tools.
type snapshot struct {
	acl   *policy.ACL
	tools []*toolSpec // sorted by name
}

// toolSpec is one capability as a tool.
type toolSpec struct {
	capability string
	tool       *sdk.Tool
}

// view is the SDK server of one caller with the tools it holds.
type view struct {
	caller string
	srv    *sdk.Server
	mu     sync.RWMutex
	tools  map[string]*toolSpec // tool name → what the server holds
}

// New returns a server of src's capabilities.
func New(src Source, cfg Config, opts ...Option) *Server {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	s := &Server{src: src, cfg: cfg, log: zerolog.Nop(), views: map[string]*view{}, synced: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Start reads the source and follows it until Close: within a moment of a
// change (a capability appearing or vanishing, a declaration or the ACL
// changing) every view holds the new tools and its clients are notified.
func (s *Server) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.mu.Lock()
	if s.done != nil || s.closed {
		s.mu.Unlock()
		cancel()
		return
	}
	s.stop, s.done = cancel, make(chan struct{})
	s.mu.Unlock()
	changed := s.src.Changed() // before reading: no change is missed
	s.refresh()
	go s.watch(ctx, changed)
}

// watch refreshes the views at every change of the source.
func (s *Server) watch(ctx context.Context, changed []<-chan struct{}) {
	defer close(s.done)
	for {
		cases := make([]reflect.SelectCase, 0, len(changed)+1)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
		for _, c := range changed {
			if c != nil {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
			}
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			return
		}
		changed = s.src.Changed()
		s.refresh()
	}
}

// refresh reads the source and brings every view up to date.
func (s *Server) refresh() {
	snap := s.read()
	s.mu.Lock()
	s.snap = snap
	views := make([]*view, 0, len(s.views))
	for _, v := range s.views {
		views = append(views, v)
	}
	s.mu.Unlock()
	for _, v := range views {
		s.sync(v, snap)
	}
	s.mu.Lock()
	close(s.synced)
	s.synced = make(chan struct{})
	s.mu.Unlock()
}

// Synced returns a channel closed when the next refresh has been applied
// to every view (each view's notification is then on its way).
func (s *Server) Synced() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// read takes a snapshot of the source.
func (s *Server) read() *snapshot {
	offers := s.src.Offers()
	caps := make([]string, len(offers))
	for i, o := range offers {
		caps[i] = o.Capability
	}
	names := ToolNames(caps)
	snap := &snapshot{acl: s.src.ACL(), tools: make([]*toolSpec, 0, len(offers))}
	for _, o := range offers {
		snap.tools = append(snap.tools, &toolSpec{capability: o.Capability, tool: buildTool(names[o.Capability], o)})
	}
	return snap
}

// allows reports whether the snapshot's ACL lets caller call capability.
func (snap *snapshot) allows(caller, capability string) bool {
	return snap.acl == nil || snap.acl.Allows(caller, capability)
}

// view returns caller's view, made (and filled) on first use; nil once
// the server is closed.
func (s *Server) view(caller string) *view {
	if v, ok := s.ready.Load(caller); ok {
		return v.(*view)
	}
	s.mu.Lock()
	if v, ok := s.views[caller]; ok || s.closed {
		s.mu.Unlock()
		return v
	}
	if s.snap == nil {
		s.snap = s.read() // not started: serve what is there now
	}
	v := &view{caller: caller, tools: map[string]*toolSpec{}}
	v.srv = sdk.NewServer(&sdk.Implementation{Name: s.cfg.Name, Version: s.cfg.Version}, &sdk.ServerOptions{
		Instructions: s.cfg.Instructions,
		HasTools:     true,
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	s.views[caller] = v
	snap := s.snap
	// Filled under s.mu, so that a refresh running now cannot apply an
	// older snapshot after this one (it syncs the views it saw after
	// storing its snapshot, and this view is not among them).
	s.sync(v, snap)
	s.ready.Store(caller, v)
	s.mu.Unlock()
	return v
}

// sync makes v hold the tools of snap that its caller may call. The SDK
// debounces the changes into one notifications/tools/list_changed per
// connected client.
func (s *Server) sync(v *view, snap *snapshot) {
	v.mu.Lock()
	defer v.mu.Unlock()
	want := make(map[string]*toolSpec, len(snap.tools))
	for _, t := range snap.tools {
		if snap.allows(v.caller, t.capability) {
			want[t.tool.Name] = t
		}
	}
	var gone []string
	for name := range v.tools {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		v.srv.RemoveTools(gone...)
		for _, name := range gone {
			delete(v.tools, name)
		}
	}
	for name, t := range want {
		if old, ok := v.tools[name]; ok && sameTool(old, t) {
			continue
		}
		if err := addTool(v.srv, t.tool, s.callHandler(v, t.capability)); err != nil {
			s.log.Warn().Err(err).Str("capability", t.capability).Str("tool", name).Msg("mcp: tool not served")
			v.srv.RemoveTools(name)
			delete(v.tools, name)
			continue
		}
		v.tools[name] = t
	}
}

// sameTool reports whether a and b serve the same tool.
func sameTool(a, b *toolSpec) bool {
	if a.capability != b.capability {
		return false
	}
	ja, err1 := json.Marshal(a.tool)
	jb, err2 := json.Marshal(b.tool)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// addTool adds t to srv, turning the SDK's panic on a tool it refuses
// into an error.
func addTool(srv *sdk.Server, t *sdk.Tool, h sdk.ToolHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the MCP SDK refuses the tool: %v", r)
		}
	}()
	srv.AddTool(t, h)
	return nil
}

// Serve serves caller's tools on t (stdio: sdk.StdioTransport) until the
// client leaves or ctx ends.
func (s *Server) Serve(ctx context.Context, caller string, t sdk.Transport) error {
	v := s.view(caller)
	if v == nil {
		return fmt.Errorf("mcp: server closed")
	}
	return v.srv.Run(ctx, t)
}

// Tools returns the tools caller is served now, sorted by name (what
// tools/list answers).
func (s *Server) Tools(caller string) []*sdk.Tool {
	v := s.view(caller)
	if v == nil {
		return nil
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*sdk.Tool, 0, len(v.tools))
	for _, t := range v.tools {
		out = append(out, t.tool)
	}
	sortTools(out)
	return out
}

// Close stops following the source and closes every session: their
// streams end, so an HTTP server's shutdown does not wait for them.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	stop, done := s.stop, s.done
	views := make([]*view, 0, len(s.views))
	for _, v := range s.views {
		views = append(views, v)
	}
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	for _, v := range views {
		for ss := range v.srv.Sessions() {
			_ = ss.Close()
		}
	}
}
