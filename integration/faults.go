package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// NeverAck registers an instance that subscribes to its delivery subject and
// heartbeats but never answers: a hung process. It returns the heartbeat so
// the caller can stop it (without deregistering) to let the record expire.
func NeverAck(tb testing.TB, nc *nats.Conn, id string, hb time.Duration, caps ...string) *registry.Heartbeat {
	tb.Helper()
	return RawInstance(tb, nc, id, hb, func(*nats.Msg) {}, caps...)
}

// RawInstance registers an instance that heartbeats and hands each delivery
// to answer, on the subscription's goroutine: an agent that speaks the
// protocol, or gets it wrong, without agentkit.
func RawInstance(tb testing.TB, nc *nats.Conn, id string, hb time.Duration, answer nats.MsgHandler, caps ...string) *registry.Heartbeat {
	tb.Helper()
	return RawAgent(tb, nc, registry.Record{ID: id, Type: "hung", Capabilities: caps, MaxConcurrent: 8, HeartbeatMS: hb.Milliseconds()}, answer)
}

// RawAgent is RawInstance with the whole record given: its type, deps and
// limits as a test needs them.
func RawAgent(tb testing.TB, nc *nats.Conn, rec registry.Record, answer nats.MsgHandler) *registry.Heartbeat {
	tb.Helper()
	sub, err := nc.Subscribe(streams.Subjects{}.Agent(rec.ID), answer)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := registry.Open(context.Background(), js)
	if err != nil {
		tb.Fatal(err)
	}
	h, err := registry.NewHeartbeat(reg, rec, zerolog.Nop())
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Stop(context.Background(), false) })
	return h
}

// Child processes: the test binary re-executed in one of these roles, so
// fault tests can kill a real process.
const (
	// ChildEcho is an echo agent (capability "echo").
	ChildEcho = "echo"
	// ChildCrasher serves "pay.charge": it records its side effect by
	// publishing on EffectsSubject, then dies before replying.
	ChildCrasher = "crasher"
	// ChildDispatcher is a dispatcher with the default configuration.
	ChildDispatcher = "dispatcher"
	// ChildSleeper serves "risk.score": it acknowledges and never
	// answers, until it is killed.
	ChildSleeper = "sleeper"

	// EffectsSubject carries one message per side effect of a write agent.
	EffectsSubject = "test.effects"

	envChildRole = "AGENTREACH_TEST_CHILD"
	envChildURL  = "AGENTREACH_TEST_CHILD_URL"
	envChildID   = "AGENTREACH_TEST_CHILD_ID"
	envChildHB   = "AGENTREACH_TEST_CHILD_HEARTBEAT"
	envChildCfg  = "AGENTREACH_TEST_CHILD_CONFIG"
)

// RunChildIfAsked turns the test binary into a child process when started
// by StartChild; call it first in TestMain. It never returns in the child.
func RunChildIfAsked() {
	role := os.Getenv(envChildRole)
	if role == "" {
		return
	}
	if err := runChild(role); err != nil {
		fmt.Fprintln(os.Stderr, "child", role+":", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func runChild(role string) error {
	nc, err := nats.Connect(os.Getenv(envChildURL), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if role == ChildWorkflows {
		return runWorkflowsChild(ctx, nc, os.Getenv(envChildCfg))
	}
	if role == ChildDispatcher {
		var cfg config.Config
		if c := os.Getenv(envChildCfg); c != "" {
			if err := json.Unmarshal([]byte(c), &cfg); err != nil {
				return err
			}
		}
		d, err := dispatcher.New(nc, cfg)
		if err != nil {
			return err
		}
		if err := d.Start(ctx); err != nil {
			return err
		}
		fmt.Println("ready")
		<-ctx.Done()
		return d.Drain(context.Background())
	}
	hb, _ := time.ParseDuration(os.Getenv(envChildHB))
	a, err := agentkit.New(nc, agentkit.Config{Type: role, ID: os.Getenv(envChildID), Heartbeat: hb})
	if err != nil {
		return err
	}
	switch role {
	case ChildEcho:
		err = a.Handle("echo", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil })
	case ChildSleeper:
		err = a.Handle("risk.score", func(ctx context.Context, _ *agentkit.Request) (any, error) {
			<-ctx.Done() // only a hard stop ends it; a test kills the process first
			return nil, ctx.Err()
		})
	case ChildCrasher:
		err = a.Handle("pay.charge", func(_ context.Context, r *agentkit.Request) (any, error) {
			_ = nc.Publish(EffectsSubject, []byte(r.RequestID))
			_ = nc.Flush()
			os.Exit(1) // dies after the side effect, before any reply
			return nil, nil
		})
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// StartChild starts the test binary as a child process in role, connected
// to url, and kills it when the test ends. id and hb name an agent; cfg
// configures a dispatcher (JSON of config.Config).
func StartChild(tb testing.TB, role, url, id string, hb time.Duration, cfg *config.Config) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildRole+"="+role, envChildURL+"="+url, envChildID+"="+id, envChildHB+"="+hb.String())
	if cfg != nil {
		b, err := json.Marshal(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		cmd.Env = append(cmd.Env, envChildCfg+"="+string(b))
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// Slow returns a handler that takes d (or until its context ends).
func Slow(d time.Duration) agentkit.Handler {
	return func(ctx context.Context, r *agentkit.Request) (any, error) {
		select {
		case <-time.After(d):
			return r.Data, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Failing returns a handler that fails every task with an INTERNAL error,
// counting its calls in n.
func Failing(n *atomic.Int64) agentkit.Handler {
	return func(context.Context, *agentkit.Request) (any, error) {
		n.Add(1)
		return nil, errors.New("injected failure")
	}
}

// Flapping returns a handler that fails while broken is true and echoes
// otherwise; flip it to make the agent flap.
func Flapping(broken *atomic.Bool) agentkit.Handler {
	return func(_ context.Context, r *agentkit.Request) (any, error) {
		if broken.Load() {
			return nil, errors.New("injected failure (flapping)")
		}
		return r.Data, nil
	}
}
