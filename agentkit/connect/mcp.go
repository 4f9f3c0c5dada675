package connect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// Defaults of MCPConfig.
const (
	DefaultPingInterval = 5 * time.Second
	DefaultRetryMin     = 200 * time.Millisecond
	DefaultRetryMax     = 10 * time.Second
)

// MCPConfig describes an MCP connector.
type MCPConfig struct {
	// Name is the agent type and the prefix of every capability: the
	// tool "search" is served as "<Name>.search" (required; dotted
	// lowercase tokens).
	Name string
	// URL is the server's streamable HTTP endpoint; or
	URL string
	// Command runs the server, speaking MCP on its stdin and stdout
	// (its stderr is the connector's). One of URL and Command.
	Command []string
	// HTTPClient is used with URL; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Agent configures the agent (ID, MaxConcurrent, Heartbeat, Subjects,
	// DrainTimeout, …); its Type is Name and its Declaration is made from
	// the tools.
	Agent agentkit.Config
	// AgentOptions are passed to agentkit.New.
	AgentOptions []agentkit.Option
	// Log is the connector's logger; nil writes info and above to standard
	// error as JSON lines.
	Log *zerolog.Logger
	// PingInterval is how often the upstream is pinged; a ping that fails
	// (or a call that finds the upstream gone, at once) makes the instance
	// leave until the upstream answers again. Default 5 s.
	PingInterval time.Duration
	// RetryMin and RetryMax bound the back-off between reconnections
	// (doubling); defaults 200 ms and 10 s.
	RetryMin, RetryMax time.Duration
	// OnServe, when set, is called after each change of what the instance
	// serves, with the capabilities (sorted), and with nil when it leaves.
	OnServe func(capabilities []string)
}

// MCP is a running MCP connector: an agent whose capabilities are an MCP
// server's tools. Make it with NewMCP and run it with Run.
type MCP struct {
	nc  *nats.Conn
	cfg MCPConfig
	log zerolog.Logger

	sess    atomic.Pointer[mcp.ClientSession]
	changed chan struct{} // the server's tools/list_changed
	lost    chan struct{} // a call found the upstream gone: ping now

	agent    *agentkit.Agent // nil while the instance is not registered
	serving  []string
	declared []byte // the declaration the agent serves, as JSON
	// registered is set once the instance has registered: from then on a
	// failure to register again is retried, not returned.
	registered bool
	mu         sync.Mutex // guards skipped
	skipped    []Skipped
}

// ErrConfig wraps every invalid configuration.
var ErrConfig = errors.New("connect: invalid configuration")

// NewMCP checks cfg and returns a connector serving on nc.
func NewMCP(nc *nats.Conn, cfg MCPConfig) (*MCP, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrConfig)
	}
	if err := streams.ValidateCapability(cfg.Name); err != nil {
		return nil, fmt.Errorf("%w: name: %v", ErrConfig, err)
	}
	if (cfg.URL == "") == (len(cfg.Command) == 0) {
		return nil, fmt.Errorf("%w: give the server's URL or its command, one of the two", ErrConfig)
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(DefaultRetryMax, cfg.RetryMin)
	}
	cfg.Agent.Type = cfg.Name
	cfg.Agent.Declaration, cfg.Agent.DeclarationFile = nil, ""
	if cfg.Agent.ID != "" {
		if err := streams.ValidateInstanceID(cfg.Agent.ID); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	c := &MCP{nc: nc, cfg: cfg, changed: make(chan struct{}, 1), lost: make(chan struct{}, 1)}
	if cfg.Log != nil {
		c.log = *cfg.Log
	} else {
		c.log = zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	}
	c.log = c.log.With().Str("connector", cfg.Name).Logger()
	return c, nil
}

// Skipped returns the tools left out at the last listing, with the reasons.
func (c *MCP) Skipped() []Skipped {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.skipped)
}

// errStart marks an error of the agent itself (not of the upstream): Run
// returns it instead of retrying.
type errStart struct{ err error }

func (e errStart) Error() string { return e.err.Error() }
func (e errStart) Unwrap() error { return e.err }

// Run connects to the upstream, serves its tools until ctx ends, and then
// drains. While the upstream is unreachable the instance is not registered:
// Run reconnects with back-off and registers again once it answers. It
// returns nil when ctx ends, or the error that keeps the agent from
// registering the first time (a refused identity, a missing bucket); once
// it has registered, such errors are retried like a lost upstream.
func (c *MCP) Run(ctx context.Context) error {
	defer c.leave()
	wait := c.cfg.RetryMin
	for {
		up, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if se := (errStart{}); errors.As(err, &se) && !c.registered {
			return se.err // never registered: the configuration is wrong, not the weather
		}
		c.leave()
		if up {
			wait = c.cfg.RetryMin
		}
		c.log.Warn().Err(err).Dur("retry_in", wait).Msg("upstream lost; the instance has left until it answers")
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, c.cfg.RetryMax)
	}
}

// transport returns a fresh transport to the upstream.
func (c *MCP) transport(ctx context.Context) mcp.Transport {
	if c.cfg.URL != "" {
		return &mcp.StreamableClientTransport{Endpoint: c.cfg.URL, HTTPClient: c.cfg.HTTPClient, MaxRetries: 1}
	}
	cmd := exec.CommandContext(ctx, c.cfg.Command[0], c.cfg.Command[1:]...)
	cmd.Stderr = os.Stderr
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}
}

// session runs one upstream session; up reports whether it got as far as
// serving.
func (c *MCP) session(ctx context.Context) (up bool, err error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "agentreach-connect", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case c.changed <- struct{}{}:
			default:
			}
		},
	})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cctx, ccancel := context.WithTimeout(sctx, max(c.cfg.PingInterval, 10*time.Second))
	cs, err := client.Connect(cctx, c.transport(sctx), nil)
	ccancel()
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = cs.Close() }()
	c.sess.Store(cs)
	defer c.sess.Store(nil)
	select { // a change before this listing is in it
	case <-c.changed:
	default:
	}
	select {
	case <-c.lost:
	default:
	}
	if err := c.sync(ctx, cs); err != nil {
		return false, err
	}
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	ping := time.NewTicker(c.cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case err := <-ended:
			return true, fmt.Errorf("the session ended: %v", err)
		case <-c.changed:
			if err := c.sync(ctx, cs); err != nil {
				return true, err
			}
		case <-ping.C:
		case <-c.lost:
		}
		if err := c.ping(ctx, cs); err != nil {
			return true, err
		}
	}
}

// ping checks that the upstream answers. Any JSON-RPC answer will do, an
// error too: some servers of the stateless revision refuse a ping without
// the request envelope the SDK does not add to it.
func (c *MCP) ping(ctx context.Context, cs *mcp.ClientSession) error {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.PingInterval)
	defer cancel()
	err := cs.Ping(pctx, nil)
	var rpc *jsonrpc.Error
	if err == nil || errors.As(err, &rpc) || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("ping: %w", err)
}

// sync lists the tools and makes the instance serve them: registering it
// the first time, redeclaring it after.
func (c *MCP) sync(ctx context.Context, cs *mcp.ClientSession) error {
	lctx, cancel := context.WithTimeout(ctx, max(c.cfg.PingInterval, 10*time.Second))
	defer cancel()
	var entries []entry
	for t, err := range cs.Tools(lctx, nil) {
		if err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		dc, err := ToolCapability(c.cfg.Name, t)
		entries = append(entries, entry{name: t.Name, cap: dc, err: err})
	}
	served, skipped := resolve(entries)
	c.mu.Lock()
	c.skipped = skipped
	c.mu.Unlock()
	for _, s := range skipped {
		c.log.Warn().Str("tool", s.Name).Str("reason", s.Reason).Msg("tool skipped")
	}
	if len(served) == 0 {
		c.log.Error().Int("tools", len(entries)).Msg("the server offers no tool that can be served; the instance waits for its tool list to change")
		c.leave()
		return nil
	}
	handlers := make(map[string]agentkit.Handler, len(served))
	caps := make([]string, 0, len(served))
	for _, e := range served {
		repeatable := e.cap.Mode == declare.ModeRead || e.cap.Idempotent
		handlers[e.cap.Name] = c.call(e.name, repeatable)
		caps = append(caps, e.cap.Name)
	}
	desc := "MCP server"
	if ir := cs.InitializeResult(); ir != nil && ir.ServerInfo != nil {
		desc = fmt.Sprintf("MCP server %s %s", ir.ServerInfo.Name, ir.ServerInfo.Version)
	}
	decl := declaration(c.cfg.Name, "", desc+" (agentreach connect mcp)", served)
	if c.agent != nil {
		if slices.Equal(caps, c.serving) && c.sameDeclaration(decl) {
			return nil
		}
		if err := c.agent.Redeclare(lctx, handlers, decl); err != nil {
			return fmt.Errorf("redeclare: %w", err)
		}
	} else if err := c.start(ctx, handlers, decl); err != nil {
		return errStart{err}
	}
	c.registered = true
	c.serving = caps
	c.declared, _ = json.Marshal(decl)
	c.log.Info().Strs("capabilities", caps).Int("skipped", len(skipped)).Msg("serving the server's tools")
	if c.cfg.OnServe != nil {
		c.cfg.OnServe(slices.Clone(caps))
	}
	return nil
}

func (c *MCP) sameDeclaration(d *declare.Declaration) bool {
	b, err := json.Marshal(d)
	return err == nil && bytes.Equal(b, c.declared)
}

// start registers the instance with handlers and decl.
func (c *MCP) start(ctx context.Context, handlers map[string]agentkit.Handler, decl *declare.Declaration) error {
	cfg := c.cfg.Agent
	cfg.Declaration = decl
	opts := append([]agentkit.Option{agentkit.WithLogger(c.log), agentkit.WithoutSignals()}, c.cfg.AgentOptions...)
	a, err := agentkit.New(c.nc, cfg, opts...)
	if err != nil {
		return err
	}
	for capability, h := range handlers {
		if err := a.Handle(capability, h); err != nil {
			return err
		}
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	c.agent = a
	return nil
}

// leave drains and deregisters the instance, if it is registered.
func (c *MCP) leave() {
	if c.agent == nil {
		return
	}
	a := c.agent
	c.agent, c.serving, c.declared = nil, nil, nil
	timeout := c.cfg.Agent.DrainTimeout
	if timeout <= 0 {
		timeout = agentkit.DefaultDrainTimeout
	}
	dctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	if err := a.Drain(dctx); err != nil {
		c.log.Warn().Err(err).Msg("drain")
	}
	if c.cfg.OnServe != nil {
		c.cfg.OnServe(nil)
	}
}

// call is the handler of the tool named tool.
func (c *MCP) call(tool string, repeatable bool) agentkit.Handler {
	return func(ctx context.Context, req *agentkit.Request) (any, error) {
		args, err := arguments(req)
		if err != nil {
			return nil, err
		}
		cs := c.sess.Load()
		if cs == nil {
			return nil, agentkit.Busyf("the upstream of %s is not connected", c.cfg.Name)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			e, lost := callError(err, repeatable)
			if lost {
				select {
				case c.lost <- struct{}{}:
				default:
				}
			}
			return nil, e
		}
		out, err := toolResult(res)
		if err != nil {
			return nil, err
		}
		if req.ContentType == streams.ContentTypeJSON {
			return []byte(out), nil
		}
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			return nil, streams.NewError(streams.CodeInternal, "result: %v", err)
		}
		return v, nil
	}
}

// arguments are a task's payload as a tool's arguments: a JSON payload is
// passed as it is (no number loses precision), another is decoded; either
// must be an object, or empty / null for none.
func arguments(req *agentkit.Request) (any, error) {
	data := bytes.TrimSpace(req.Data)
	if len(data) == 0 {
		return map[string]any{}, nil
	}
	if req.ContentType == streams.ContentTypeJSON {
		switch {
		case !json.Valid(data):
			return nil, agentkit.BadRequest("the payload is not valid JSON")
		case string(data) == "null":
			return map[string]any{}, nil
		case data[0] != '{':
			return nil, agentkit.BadRequest("a tool's arguments must be a JSON object")
		}
		return json.RawMessage(data), nil
	}
	var v any
	if err := req.Decode(&v); err != nil {
		return nil, err
	}
	switch v.(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		return v, nil
	}
	return nil, agentkit.BadRequest("a tool's arguments must be an object")
}

// ToolCapability returns the declared capability serving tool t under
// prefix, or why t cannot be served: its name maps to no capability, or
// its schemas do not compile. Annotations give the mode: readOnlyHint →
// "read" (and idempotent), otherwise "write", idempotent as idempotentHint;
// a tool without annotations says neither.
func ToolCapability(prefix string, t *mcp.Tool) (declare.DeclaredCapability, error) {
	var dc declare.DeclaredCapability
	if t == nil {
		return dc, errors.New("the tool is null")
	}
	name, err := CapabilityName(prefix, t.Name)
	if err != nil {
		return dc, err
	}
	in, err := rawSchema(t.InputSchema)
	if err != nil {
		return dc, fmt.Errorf("inputSchema: %v", err)
	}
	out, err := rawSchema(t.OutputSchema)
	if err != nil {
		return dc, fmt.Errorf("outputSchema: %v", err)
	}
	dc = declare.DeclaredCapability{Name: name, Description: t.Description, InputSchema: in, OutputSchema: out}
	if dc.Description == "" {
		dc.Description = t.Title
	}
	if a := t.Annotations; a != nil {
		if a.ReadOnlyHint {
			dc.Mode, dc.Idempotent = declare.ModeRead, true
		} else {
			dc.Mode, dc.Idempotent = declare.ModeWrite, a.IdempotentHint
		}
	}
	if err := checkCapability(prefix, dc); err != nil {
		return dc, err
	}
	return dc, nil
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
