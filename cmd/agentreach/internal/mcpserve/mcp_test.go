package mcpserve

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/demo"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/stack"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/task"
	"github.com/agent-reach/agentreach/streams"
)

// TestMCPStdio runs the built binary's `agentreach mcp` as a desktop client
// does, and talks to it with the Go SDK's client over its stdin and stdout:
// the demo capabilities are tools, a call is routed, a failure is an isError
// result, an agent joining and leaving is pushed as tools/list_changed, and
// a cancelled call is cancelled on reach.cancel.
func TestMCPStdio(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agentreach")
	if out, err := exec.Command("go", "build", "-o", bin, "../..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	url := clitest.StartStack(t, stack.RunDispatcher, demo.Run, task.RunCall)
	conn := func() *nats.Conn {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	nc := conn()
	// hang waits for its cancel.
	started := make(chan struct{}, 1)
	h, err := agentkit.New(conn(), agentkit.Config{Type: "hang", ID: "hang-1"}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Handle("hang", func(ctx context.Context, _ *agentkit.Request) (any, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	startCtx, stopStart := context.WithTimeout(context.Background(), 20*time.Second)
	defer stopStart()
	if err := h.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Drain(context.Background()) })
	cancels := make(chan string, 16)
	sub, err := nc.Subscribe(streams.Subjects{}.Cancel(), func(m *nats.Msg) { cancels <- m.Header.Get(streams.HeaderRequestID) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	changed := make(chan struct{}, 1)
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &sdk.CommandTransport{Command: exec.Command(bin, "mcp", "--server", url, "--log-level", "warn")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list := func() []string {
		t.Helper()
		var names []string
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, tool.Name)
		}
		return names
	}
	call := func(name string, args any) (bool, string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("call %s: %v", name, err)
		}
		return res.IsError, res.Content[0].(*sdk.TextContent).Text
	}
	if names := list(); !slices.Equal(names, []string{"echo", "hang", "math_add", "slow", "story"}) {
		t.Fatalf("tools %v", names)
	}
	if isErr, text := call("math_add", map[string]any{"a": 1, "b": 2}); isErr || text != `{"sum":3}` {
		t.Fatalf("math_add: %v %q", isErr, text)
	}
	if isErr, text := call("math_add", map[string]any{"a": 1}); !isErr || !strings.HasPrefix(text, "BIZ_REJECT") {
		t.Fatalf("math_add without b: %v %q", isErr, text)
	}

	// An agent joins, then leaves.
	a, err := agentkit.New(conn(), agentkit.Config{Type: "late", ID: "late-1"}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Handle("late.join", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil })
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitList := func(want func([]string) bool) {
		t.Helper()
		for names := list(); !want(names); names = list() {
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("tools %v", names)
			}
		}
	}
	waitList(func(n []string) bool { return slices.Contains(n, "late_join") })
	if isErr, text := call("late_join", map[string]any{"x": 1}); isErr || text != `{"x":1}` {
		t.Fatalf("late_join: %v %q", isErr, text)
	}
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	waitList(func(n []string) bool { return !slices.Contains(n, "late_join") })

	// A cancelled call: the server publishes reach.cancel.
	callCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &sdk.CallToolParams{Name: "hang", Arguments: map[string]any{}})
		done <- err
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("hang never started")
	}
	stop()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned no error")
	}
	select {
	case id := <-cancels:
		if id == "" {
			t.Fatal("reach.cancel without a request id")
		}
	case <-ctx.Done():
		t.Fatal("no reach.cancel after the client cancelled")
	}
}
