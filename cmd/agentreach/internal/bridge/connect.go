package bridge

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/agentkit/connect"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/streams"
)

const connectAbout = `
Joins something that is not an Agent-Reach agent as one, under --name:

  mcp      an MCP server: each tool is the capability <name>.<tool>, its schemas
           the declaration, read-only / idempotent from its annotations; the
           server's tools/list_changed redeclares. Give its streamable HTTP
           endpoint (--url) or the command that serves it on stdio (after --).
  openapi  an HTTP API described by OpenAPI 3 (--spec, --base-url): each
           operation is <name>.<operationId>, its parameters and request body
           ("body") the input; 4xx → BIZ_REJECT / BAD_REQUEST, 429 and 503 →
           TARGET_BUSY (Retry-After honoured), 5xx and no answer → TIMEOUT.

Upstream names become capabilities in lower case ("getWeather" → get_weather);
tools or operations that cannot be served (a schema that does not compile, a
name given twice) are skipped with a logged reason. Several connector processes
for one upstream are several instances. While an MCP upstream is unreachable the
instance leaves the registry and comes back when it answers. With auth on, run
it as an agent identity made for the type (` + "`agentreach auth agent ID --type NAME --serves 'NAME.*'`" + `);
its instance id is the identity's. See docs/mcp.md.`

// connectFlags are the flags both connectors share.
type connectFlags struct {
	conn          cli.ConnFlags
	name          string
	id            string
	maxConcurrent int
	heartbeat     time.Duration
}

func (f *connectFlags) register(cl *cli.Cmdline, define func(*flag.FlagSet)) {
	cl.Group("Flags", func(fs *flag.FlagSet) {
		fs.StringVar(&f.name, "name", "", "the agent type and capability prefix (required), e.g. github")
		define(fs)
		fs.StringVar(&f.id, "id", "", "instance `id`; default: the identity's name with an agent identity, else <name>-<random>")
		fs.IntVar(&f.maxConcurrent, "max-concurrent", agentkit.DefaultMaxConcurrent, "calls run at once")
		fs.DurationVar(&f.heartbeat, "heartbeat", 0, "heartbeat interval; 0 reads it from the REACH_AGENTS bucket")
	})
	cl.Group("Connection flags", func(fs *flag.FlagSet) {
		f.conn.Register(fs, 10*time.Second, "bound on connecting and registering")
	})
}

// agentConfig is the agent configuration of the flags; with an agent
// identity, the instance id is its name.
func (f *connectFlags) agentConfig() (agentkit.Config, error) {
	id := f.id
	if id == "" && f.conn.Creds != "" {
		if name, role, err := auth.CredentialsName(f.conn.Creds); err == nil && role == auth.RoleAgent {
			id = name
		}
	}
	if err := streams.ValidateCapability(f.name); err != nil {
		return agentkit.Config{}, fmt.Errorf("--name: %v", err)
	}
	if f.maxConcurrent < 1 {
		return agentkit.Config{}, fmt.Errorf("--max-concurrent must be at least 1, got %d", f.maxConcurrent)
	}
	return agentkit.Config{ID: id, Version: cli.ShortVersion(), MaxConcurrent: f.maxConcurrent, Heartbeat: f.heartbeat,
		Subjects: f.conn.Subjects(), DrainTimeout: cli.StopTimeout - 5*time.Second}, nil
}

func RunConnect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "mcp":
			return runConnectMCP(ctx, args[1:], stdout, stderr)
		case "openapi":
			return runConnectOpenAPI(ctx, args[1:], stdout, stderr)
		}
	}
	cl := cli.NewCmdline("connect", "agentreach connect mcp|openapi [flags]", connectAbout)
	pos, code, ok := cl.Parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cl.UsageError(stderr, "want a sub-command: mcp or openapi")
	}
	return cl.UsageError(stderr, "unknown sub-command %q (want mcp or openapi)", pos[0])
}

func runConnectMCP(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		f        connectFlags
		url      string
		ping     time.Duration
		bearer   string
		upstream []string
	)
	if i := slices.Index(args, "--"); i >= 0 {
		args, upstream = args[:i], args[i+1:]
	}
	cl := cli.NewCmdline("connect mcp", "agentreach connect mcp --name NAME (--url URL | -- COMMAND [ARGS…])", connectAbout)
	f.register(cl, func(fs *flag.FlagSet) {
		fs.StringVar(&url, "url", "", "the MCP server's streamable HTTP `endpoint`")
		fs.StringVar(&bearer, "bearer", "", "a bearer `token` sent to the --url server (prefer the environment variable)")
		fs.DurationVar(&ping, "ping", connect.DefaultPingInterval, "how often the upstream is pinged; one that does not answer makes the instance leave")
	})
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	switch {
	case f.name == "":
		return cl.UsageError(stderr, "--name is required")
	case (url == "") == (len(upstream) == 0):
		return cl.UsageError(stderr, "give the server's --url or its command after --, one of the two")
	case bearer != "" && url == "":
		return cl.UsageError(stderr, "--bearer goes with --url")
	}
	acfg, err := f.agentConfig()
	if err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	log := f.conn.Logger(stderr)
	f.conn.Log = log
	var hc *http.Client
	if bearer != "" {
		hc = &http.Client{Transport: bearerTransport{token: bearer, next: http.DefaultTransport}}
	}
	nc, err := f.conn.Connect("agentreach-connect-" + f.name)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer func() { _ = cli.CloseConn(nc)(context.Background()) }()
	c, err := connect.NewMCP(nc, connect.MCPConfig{Name: f.name, URL: url, Command: upstream, HTTPClient: hc,
		Agent: acfg, Log: &log, PingInterval: ping})
	if err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	if err := c.Run(ctx); err != nil {
		return cl.Fail(stderr, err)
	}
	return cli.ExitOK
}

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}

// headerList is a repeatable --header "Name: value".
type headerList struct{ h http.Header }

func (l *headerList) String() string {
	if l == nil || len(l.h) == 0 {
		return ""
	}
	var parts []string
	for k := range l.h {
		parts = append(parts, k+": …")
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func (l *headerList) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return errors.New(`want "Name: value"`)
	}
	if l.h == nil {
		l.h = http.Header{}
	}
	l.h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	return nil
}

func (*headerList) repeatable() {}

func runConnectOpenAPI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var (
		f       connectFlags
		spec    string
		baseURL string
		headers headerList
		maxWait time.Duration
	)
	cl := cli.NewCmdline("connect openapi", "agentreach connect openapi --name NAME --spec FILE --base-url URL", connectAbout)
	f.register(cl, func(fs *flag.FlagSet) {
		fs.StringVar(&spec, "spec", "", "the OpenAPI 3 document, JSON or YAML `file` (required)")
		fs.StringVar(&baseURL, "base-url", "", "where the API is served (required), e.g. https://api.example.com/v1")
		fs.Var(&headers, "header", `a header sent with every request, "Name: value" (repeatable)`)
		fs.DurationVar(&maxWait, "max-retry-after", connect.DefaultMaxRetryAfter, "the longest Retry-After a call waits out before trying again")
	})
	if code, ok := cl.ParseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	switch {
	case f.name == "":
		return cl.UsageError(stderr, "--name is required")
	case spec == "":
		return cl.UsageError(stderr, "--spec is required")
	case baseURL == "":
		return cl.UsageError(stderr, "--base-url is required")
	}
	acfg, err := f.agentConfig()
	if err != nil {
		return cl.UsageError(stderr, "%v", err)
	}
	log := f.conn.Logger(stderr)
	f.conn.Log = log
	// The spec is read before dialling: a bad one is a start-up error
	// naming its line, with nothing registered.
	ocfg := connect.OpenAPIConfig{Name: f.name, SpecFile: spec, BaseURL: baseURL, Header: headers.h,
		MaxRetryAfter: maxWait, Agent: acfg, Log: &log}
	if err := connect.CheckOpenAPI(ocfg); err != nil {
		return cl.Fail(stderr, err)
	}
	nc, err := f.conn.Connect("agentreach-connect-" + f.name)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	defer func() { _ = cli.CloseConn(nc)(context.Background()) }()
	o, err := connect.NewOpenAPI(nc, ocfg)
	if err != nil {
		return cl.Fail(stderr, err)
	}
	log.Info().Int("capabilities", len(o.Declaration().Capabilities)).Int("skipped", len(o.Skipped())).Msg("serving the API's operations")
	if err := o.Run(ctx); err != nil {
		return cl.Fail(stderr, err)
	}
	return cli.ExitOK
}
