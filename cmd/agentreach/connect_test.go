package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/bridge"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/internal/natstest"
)

func TestConnectHelpListsEveryFlag(t *testing.T) {
	for _, sub := range []string{"mcp", "openapi"} {
		r := clitest.RunCmd(t, bridge.RunConnect, sub, "--help")
		if r.Code != cli.ExitOK || !strings.HasPrefix(r.Stdout, "Usage: agentreach connect "+sub) {
			t.Fatalf("connect %s --help: exit %d\n%s", sub, r.Code, r.Stdout)
		}
		for _, f := range commandFlags(t, "connect "+sub) {
			if !strings.Contains(r.Stdout, "  --"+f+"\n") && !strings.Contains(r.Stdout, "  --"+f+" ") {
				t.Errorf("connect %s --help does not list --%s", sub, f)
			}
		}
	}
}

func TestConnectRefusesBadInvocations(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("openapi: 3.0.0\ninfo:\n  title: x\n  version: '1'\npaths:\n  /a:\n    get: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join("..", "..", "agentkit", "connect", "testdata", "petstore.yaml")
	// Nothing is dialled: the server named does not exist.
	srv := []string{"--server", "nats://127.0.0.1:1", "--timeout", "1s"}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{}, cli.ExitUsage, "want a sub-command"},
		{[]string{"ftp"}, cli.ExitUsage, `unknown sub-command "ftp"`},
		{[]string{"mcp", "--url", "http://x"}, cli.ExitUsage, "--name is required"},
		{[]string{"mcp", "--name", "x"}, cli.ExitUsage, "one of the two"},
		{[]string{"mcp", "--name", "x", "--url", "http://x", "--", "server"}, cli.ExitUsage, "one of the two"},
		{[]string{"mcp", "--name", "x", "--bearer", "t", "--", "server"}, cli.ExitUsage, "--bearer goes with --url"},
		{[]string{"mcp", "--name", "Not A Name", "--url", "http://x"}, cli.ExitUsage, "name"},
		{[]string{"openapi", "--name", "x", "--base-url", "http://x"}, cli.ExitUsage, "--spec is required"},
		{[]string{"openapi", "--name", "x", "--spec", bad, "--base-url", "http://x"}, cli.ExitFail, "line 8"},
		{[]string{"openapi", "--name", "x", "--spec", spec, "--base-url", "ftp://x"}, cli.ExitFail, "http or https"},
		{[]string{"openapi", "--name", "x", "--spec", spec, "--base-url", "http://x", "--header", "novalue"}, cli.ExitUsage, "Name: value"},
	} {
		args := c.args
		if len(args) > 0 && (args[0] == "mcp" || args[0] == "openapi") {
			flags, cmd := args, []string(nil)
			if i := slices.Index(args, "--"); i >= 0 {
				flags, cmd = args[:i], args[i:]
			}
			args = append(append(append([]string{}, flags...), srv...), cmd...)
		}
		r := clitest.RunCmd(t, bridge.RunConnect, args...)
		if r.Code != c.code || !strings.Contains(r.Stderr, c.stderr) {
			t.Errorf("connect %q: exit %d, stderr %q; want %d with %q", c.args, r.Code, r.Stderr, c.code, c.stderr)
		}
	}
}

func TestConnectCommandsServeThroughTheStack(t *testing.T) {
	url := startStack(t)
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "shout", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, struct {
			Loud string `json:"loud"`
		}, error) {
			return nil, struct {
				Loud string `json:"loud"`
			}{strings.ToUpper(in.Text)}, nil
		})
	mcpSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(func() {
		mcpSrv.CloseClientConnections()
		mcpSrv.Close()
		for ss := range up.Sessions() {
			_ = ss.Close()
		}
	})
	rest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q,"q":%q}`, r.URL.Path, r.URL.Query().Get("q"))
	}))
	t.Cleanup(rest.Close)
	spec := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(spec, []byte(`openapi: 3.1.0
info: {title: search, version: "1"}
paths:
  /search:
    get:
      operationId: findThings
      parameters: [{name: q, in: query, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	mlog := clitest.Background(t, "connect mcp", bridge.RunConnect, "mcp", "--name", "up", "--url", mcpSrv.URL, "--server", url)
	olog := clitest.Background(t, "connect openapi", bridge.RunConnect, "openapi", "--name", "api", "--spec", spec, "--base-url", rest.URL, "--server", url)
	clitest.WaitOutput(t, mlog, "serving the server's tools")
	clitest.WaitOutput(t, olog, "agent registered")
	for _, c := range []struct{ capability, payload, want string }{
		{"up.shout", `{"text":"hi"}`, `"loud": "HI"`},
		{"api.find_things", `{"q":"cats"}`, `"q": "cats"`},
	} {
		natstest.WaitFor(t, 20*time.Second, func() error {
			r := clitest.RunCmd(t, task.RunCall, "--server", url, "--timeout", "5s", c.capability, c.payload)
			if r.Code != cli.ExitOK || !strings.Contains(r.Stdout, c.want) {
				return fmt.Errorf("call %s: exit %d: %s%s", c.capability, r.Code, r.Stdout, r.Stderr)
			}
			return nil
		})
	}
}
