package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/gateway/mcp"
	"github.com/agent-reach/agentreach/internal/natstest"
)

// tellChunks are what the tell agent streams: words as JSON strings, then
// an object (sent as its JSON).
var tellChunks = []any{"once", "upon", "a", "time", map[string]int{"words": 4}}

// tellProgress is the progress messages tellChunks become.
var tellProgress = []string{"once", "upon", "a", "time", `{"words":4}`}

// tellAgent serves tell: it streams tellChunks, then answers the whole
// story.
func tellAgent(st *Stack) {
	st.Agent(agentkit.Config{Type: "teller", ID: "teller-1"}, map[string]agentkit.Handler{
		"tell": func(ctx context.Context, r *agentkit.Request) (any, error) {
			for _, c := range tellChunks {
				if err := r.Send(ctx, c); err != nil {
					return nil, err
				}
			}
			return map[string]string{"story": "once upon a time"}, nil
		}})
}

// progressLog gathers the notifications/progress a client receives.
type progressLog struct {
	mu   sync.Mutex
	got  []*sdk.ProgressNotificationParams
	more chan struct{} // told of every notification
}

func newProgressLog() *progressLog { return &progressLog{more: make(chan struct{}, 64)} }

func (l *progressLog) handler(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	l.mu.Lock()
	l.got = append(l.got, req.Params)
	l.mu.Unlock()
	l.more <- struct{}{}
}

// wait returns the notifications once n have arrived.
func (l *progressLog) wait(t *testing.T, n int) []*sdk.ProgressNotificationParams {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		l.mu.Lock()
		got := slices.Clone(l.got)
		l.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-l.more:
		case <-deadline:
			t.Fatalf("%d progress notifications, want %d", len(got), n)
		}
	}
}

// checkProgressCalls calls tell without a progress token (no progress),
// then with one: each chunk as a notification of that token, in order
// (progress 1, 2, …, the chunk's text as message), and the whole result.
// The notifications of a call are read before its response, and handled
// in the order read, so once the second call's have arrived any of the
// first's would have too.
func checkProgressCalls(t *testing.T, cs *sdk.ClientSession, log *progressLog) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := `{"story":"once upon a time"}`
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "tell", Arguments: map[string]any{}})
	if err != nil || res.IsError || textOf(res) != want {
		t.Fatalf("tell without a token: %v, %+v", err, res)
	}
	params := &sdk.CallToolParams{Name: "tell", Arguments: map[string]any{}}
	params.SetProgressToken("story-1")
	res, err = cs.CallTool(ctx, params)
	if err != nil || res.IsError || textOf(res) != want {
		t.Fatalf("tell with a token: %v, %+v", err, res)
	}
	got := log.wait(t, len(tellProgress))
	if len(got) != len(tellProgress) {
		t.Fatalf("%d notifications, want %d", len(got), len(tellProgress))
	}
	for i, p := range got {
		if p.ProgressToken != "story-1" || p.Progress != float64(i+1) || p.Message != tellProgress[i] {
			t.Fatalf("notification %d: %+v, want progress %d %q of story-1", i, p, i+1, tellProgress[i])
		}
	}
}

func textOf(res *sdk.CallToolResult) string {
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	return strings.Join(text, "\n")
}

// TestMCPProgressFromStream: over both revisions of /mcp, a tools/call
// with a progress token is routed as a stream and each chunk reaches the
// client as notifications/progress before the complete result; without a
// token the call is as before, with no progress.
func TestMCPProgressFromStream(t *testing.T) {
	st := newMCPStack(t)
	tellAgent(st.Stack)
	WaitRoutable(t, "tell", 1, st.d)
	for _, rev := range mcpRevisions {
		t.Run(rev, func(t *testing.T) {
			log := newProgressLog()
			c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{ProgressNotificationHandler: log.handler})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: st.url}, &sdk.ClientSessionOptions{ProtocolVersion: rev})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			checkProgressCalls(t, cs, log)
		})
	}
}

// TestMCPProgressOverNATS: `agentreach mcp`'s source (NATSSource, calls
// over NATS with an agentkit.Client) streams a call with a progress token
// the same way.
func TestMCPProgressOverNATS(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	tellAgent(st)
	WaitRoutable(t, "tell", 1, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := mcp.NewNATSSource(ctx, st.Conn(), st.Client(), false, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	srv := mcp.New(src, mcp.Config{})
	srv.Start(ctx)
	defer srv.Close()
	serverSide, clientSide := sdk.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, "", serverSide) }()
	defer func() {
		cancel()
		<-done
	}()
	log := newProgressLog()
	c := sdk.NewClient(&sdk.Implementation{Name: "desktop", Version: "1"}, &sdk.ClientOptions{ProgressNotificationHandler: log.handler})
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	cs, err := c.Connect(cctx, clientSide, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !slices.ContainsFunc(srv.Tools(""), func(tool *sdk.Tool) bool { return tool.Name == "tell" }) {
			return fmt.Errorf("the NATS source does not serve tell yet")
		}
		return nil
	})
	checkProgressCalls(t, cs, log)
}

// TestMCPProgressThroughRelay: `agentreach mcp --url` (mcp.Relay of a
// gateway's /mcp) passes a call's progress on under its client's token,
// in order, before the complete result.
func TestMCPProgressThroughRelay(t *testing.T) {
	st := newMCPStack(t)
	tellAgent(st.Stack)
	WaitRoutable(t, "tell", 1, st.d)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	serverSide, clientSide := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- mcp.Relay(ctx, st.url, &http.Client{Transport: tr}, serverSide, "test", zerolog.Nop())
	}()
	defer func() {
		cancel()
		<-done
	}()
	log := newProgressLog()
	c := sdk.NewClient(&sdk.Implementation{Name: "desktop", Version: "1"}, &sdk.ClientOptions{ProgressNotificationHandler: log.handler})
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	cs, err := c.Connect(cctx, clientSide, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	checkProgressCalls(t, cs, log)
}
