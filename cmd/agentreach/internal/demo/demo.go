package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/streams"
)

const demoAbout = `
Runs the demo agents against an existing NATS server or cluster whose buckets
are provisioned (by a dispatcher or ` + "`agentreach up`" + `):

  echo      capability "echo": returns its input unchanged (--instances of them)
  slow      capability "slow": works --slow-delay, reports progress halfway, then
            returns {"slept_ms": N, "input": <input>}
  math      capability "math.add": {"a":1,"b":2} → {"sum":3}; a malformed input is
            BAD_REQUEST, a missing field a business rejection (BIZ_REJECT)
  story     capability "story": {"words": N, "delay_ms": M} streams a story a word
            at a time (try ` + "`agentreach call --stream story`" + `); the result is the
            whole text

On SIGTERM or Ctrl-C every agent drains: it stops taking tasks, finishes the
ones it has and deregisters.`

// demoDrainTimeout bounds how long a demo agent waits for its tasks when it
// drains.
const demoDrainTimeout = 10 * time.Second

// DemoFlags configure the demo agents; `up --demo` and `demo` share them.
type DemoFlags struct {
	instances int
	slowDelay time.Duration
	// jsDomain is the hub's JetStream domain for agents behind a leaf
	// node server (`demo --js-domain`, a connection flag); empty: the
	// server's own.
	jsDomain string
}

func (f *DemoFlags) Register(fs *flag.FlagSet) {
	fs.IntVar(&f.instances, "instances", 2, "how many echo instances to run")
	fs.DurationVar(&f.slowDelay, "slow-delay", 2*time.Second, "how long the slow agent works on each task")
}

func (f *DemoFlags) Validate() error {
	switch {
	case f.instances < 0:
		return fmt.Errorf("--instances must not be negative, got %d", f.instances)
	case f.slowDelay < 0:
		return fmt.Errorf("--slow-delay must not be negative, got %v", f.slowDelay)
	}
	return nil
}

// demoAgent describes one demo agent instance.
type demoAgent struct {
	typ         string
	handlers    map[string]agentkit.Handler
	timeoutHint time.Duration
	// id is the instance id with auth on (each identity is one instance:
	// echo-1, echo-2, slow-1, math-1, story-1); empty: a random one.
	id string
}

// demoAgentSet lists the demo agents of f: the echo instances, one slow
// agent and one math agent; named, each with its fixed instance id.
func (f *DemoFlags) demoAgentSet(named bool) []demoAgent {
	var set []demoAgent
	for range f.instances {
		set = append(set, demoAgent{typ: "echo", handlers: map[string]agentkit.Handler{"echo": echo}})
	}
	set = append(set,
		demoAgent{typ: "slow", handlers: map[string]agentkit.Handler{"slow": slow(f.slowDelay)}, timeoutHint: f.slowDelay},
		demoAgent{typ: "math", handlers: map[string]agentkit.Handler{"math.add": mathAdd}},
		demoAgent{typ: "story", handlers: map[string]agentkit.Handler{"story": agentkit.Typed(story)}},
	)
	if named {
		n := map[string]int{}
		for i := range set {
			n[set[i].typ]++
			set[i].id = fmt.Sprintf("%s-%d", set[i].typ, n[set[i].typ])
		}
	}
	return set
}

// DemoIdentities returns the instance id and type of every demo agent as
// it runs with auth on: the agent identities it needs.
func (f *DemoFlags) DemoIdentities() map[string]string {
	ids := map[string]string{}
	for _, a := range f.demoAgentSet(true) {
		ids[a.id] = a.typ
	}
	return ids
}

// echo returns the payload unchanged; the reply carries the request's
// content type, so JSON stays JSON and msgpack stays msgpack.
func echo(_ context.Context, req *agentkit.Request) (any, error) {
	return req.Data, nil
}

type SlowResult struct {
	SleptMS int64 `json:"slept_ms"`
	Input   any   `json:"input"`
}

// slow works for delay, sending a progress message halfway, and returns how
// long it slept with its input. It stops early when its context ends.
func slow(delay time.Duration) agentkit.Handler {
	return func(ctx context.Context, req *agentkit.Request) (any, error) {
		var in any
		if err := req.Decode(&in); err != nil {
			return nil, err
		}
		if err := sleep(ctx, delay/2); err != nil {
			return nil, err
		}
		_ = req.Progress() // best effort: a lost progress message only shortens the wait
		if err := sleep(ctx, delay-delay/2); err != nil {
			return nil, err
		}
		return SlowResult{SleptMS: delay.Milliseconds(), Input: in}, nil
	}
}

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return streams.NewError(streams.CodeDeadlineExceeded, "slow: the caller's deadline passed while working")
		}
		return fmt.Errorf("slow: interrupted: %w", ctx.Err())
	}
}

type addInput struct {
	A *float64 `json:"a"`
	B *float64 `json:"b"`
}

type addResult struct {
	Sum float64 `json:"sum"`
}

// mathAdd adds a and b. Input that does not decode is BAD_REQUEST (from
// agentkit.Typed); a missing field is a business rejection.
var mathAdd = agentkit.Typed(func(_ context.Context, _ *agentkit.Request, in addInput) (addResult, error) {
	switch {
	case in.A == nil:
		return addResult{}, agentkit.Reject(`math.add needs field "a"`)
	case in.B == nil:
		return addResult{}, agentkit.Reject(`math.add needs field "b"`)
	}
	return addResult{Sum: *in.A + *in.B}, nil
})

// demoAgents are running demo agents, each on a connection of its own.
type demoAgents struct {
	agents   []*agentkit.Agent
	conns    []*nats.Conn
	jsDomain string
}

// demoConnect opens the connection of one demo agent: called name, as
// the identity of instance id when the agents are named.
type demoConnect func(name, id string) (*nats.Conn, error)

// StartDemo starts the demo agents of f, each on a connection opened by
// connect; named, each with its fixed instance id (auth on). When one fails
// to start, those already started are drained.
func StartDemo(ctx context.Context, f *DemoFlags, heartbeat time.Duration, subjects streams.Subjects,
	connect demoConnect, named bool, log zerolog.Logger) (*demoAgents, error) {
	d := &demoAgents{jsDomain: f.jsDomain}
	for _, spec := range f.demoAgentSet(named) {
		if err := d.start(ctx, spec, heartbeat, subjects, connect, log); err != nil {
			dctx, cancel := context.WithTimeout(context.Background(), demoDrainTimeout)
			defer cancel()
			_ = d.Drain(dctx)
			return nil, fmt.Errorf("demo agent %s: %w", spec.typ, err)
		}
	}
	return d, nil
}

func (d *demoAgents) start(ctx context.Context, spec demoAgent, heartbeat time.Duration, subjects streams.Subjects,
	connect demoConnect, log zerolog.Logger) error {
	nc, err := connect("agentreach-demo-"+spec.typ, spec.id)
	if err != nil {
		return err
	}
	a, err := agentkit.New(nc, agentkit.Config{
		ID:           spec.id,
		Type:         spec.typ,
		Version:      cli.ShortVersion(),
		Heartbeat:    heartbeat,
		TimeoutHint:  spec.timeoutHint,
		DrainTimeout: demoDrainTimeout,
		Subjects:     subjects,
		// Behind a leaf node server: the hub's JetStream.
		JetStreamDomain: d.jsDomain,
	}, agentkit.WithLogger(log), agentkit.WithoutSignals())
	if err == nil {
		for capability, h := range spec.handlers {
			if err = a.Handle(capability, h); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = a.Start(ctx)
	}
	if err != nil {
		nc.Close()
		return err
	}
	d.agents = append(d.agents, a)
	d.conns = append(d.conns, nc)
	return nil
}

// IDs returns the instance ids of the agents.
func (d *demoAgents) IDs() []string {
	ids := make([]string, len(d.agents))
	for i, a := range d.agents {
		ids[i] = a.ID()
	}
	return ids
}

// Drain drains every agent at once and closes their connections.
func (d *demoAgents) Drain(ctx context.Context) error {
	errs := make([]error, len(d.agents))
	var wg sync.WaitGroup
	for i, a := range d.agents {
		wg.Go(func() {
			if err := a.Drain(ctx); err != nil {
				errs[i] = fmt.Errorf("%s: %w", a.ID(), err)
			}
			errs[i] = errors.Join(errs[i], cli.CloseConn(d.conns[i])(ctx))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		conn      cli.ConnFlags
		df        DemoFlags
		heartbeat time.Duration
		credsDir  string
	)
	cl := cli.NewCmdline("demo", "agentreach demo [flags]", demoAbout)
	cl.Group("Flags", func(fs *flag.FlagSet) {
		df.Register(fs)
		fs.DurationVar(&heartbeat, "heartbeat", 0,
			"agents' heartbeat interval; 0 reads it from the REACH_AGENTS bucket (its TTL / 3),\nanything else must match the bucket")
		fs.StringVar(&credsDir, "creds-dir", "",
			"with auth on: the `directory` of every agent's credentials, <instance id>.creds; the agents\n"+
				"then have fixed ids (echo-1, echo-2, slow-1, math-1, story-1: `agentreach auth agent echo-1 --type echo` …)")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		conn.Register(fs, 10*time.Second, "bound on connecting and registering each agent")
		conn.RegisterJSDomain(fs)
	})
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	if err := df.Validate(); err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	df.jsDomain = conn.JSDomain()
	if credsDir != "" && conn.Creds != "" {
		return cl.UsageError(stderr, "use either --creds-dir (one identity per agent) or --creds, not both")
	}
	log := conn.Logger(stderr)
	conn.Log = log
	if err := serveDemo(ctx, &conn, &df, heartbeat, credsDir, log); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return cli.ExitFail
	}
	return cli.ExitOK
}

// serveDemo runs the demo agents until ctx ends, then drains them. With
// credsDir each agent connects as its own identity.
func serveDemo(ctx context.Context, conn *cli.ConnFlags, df *DemoFlags, heartbeat time.Duration, credsDir string, log zerolog.Logger) error {
	connect := func(name, id string) (*nats.Conn, error) {
		if credsDir == "" {
			return conn.Connect(name)
		}
		own := *conn
		own.Creds = filepath.Join(credsDir, id+".creds")
		return own.Connect(name)
	}
	for _, a := range df.demoAgentSet(credsDir != "") { // bad flags or files fail before dialling
		own := *conn
		if credsDir != "" {
			own.Creds = filepath.Join(credsDir, a.id+".creds")
		}
		if _, err := own.Options("check"); err != nil {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, conn.Timeout)
	defer cancel()
	agents, err := StartDemo(sctx, df, heartbeat, conn.Subjects(), connect, credsDir != "", log)
	if err != nil {
		return err
	}
	log.Info().Strs("agents", agents.IDs()).Msg("demo agents running")
	<-ctx.Done()
	log.Info().Msg("stopping: draining the demo agents")
	dctx, cancel := context.WithTimeout(context.Background(), cli.StopTimeout)
	defer cancel()
	return agents.Drain(dctx)
}
