// Command goagent is the conformance agent written with agentkit, the Go
// SDK: it serves the capabilities of docs/conformance.md and passes
// `agentreach conformance -- goagent`. It doubles as an example of agentkit:
// typed handlers, a rejection, progress reports, idempotent writes (agentkit
// claims, stores and replays the key) and a drain on SIGTERM.
//
// It reads AGENTREACH_SERVER (the NATS URL, default nats://127.0.0.1:4222),
// AGENTREACH_AGENT_ID (its instance id, default conformance-<random>) and,
// where auth is on, AGENTREACH_CREDS (its identity's credentials file, as
// `agentreach conformance --auth` sets it).
// Its heartbeat is the one the REACH_AGENTS bucket was provisioned with.
//
//	go build -o goagent ./examples/goagent && agentreach conformance -- ./goagent
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/streams"
)

// maxConcurrent is how many tasks the agent runs at once.
const maxConcurrent = 4

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "goagent: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	server := os.Getenv("AGENTREACH_SERVER")
	if server == "" {
		server = nats.DefaultURL
	}
	id := os.Getenv("AGENTREACH_AGENT_ID") // empty: agentkit makes one up
	if id != "" {
		if err := streams.ValidateInstanceID(id); err != nil {
			return fmt.Errorf("AGENTREACH_AGENT_ID: %w", err)
		}
	}
	opts := []nats.Option{nats.Name("goagent")}
	if creds := os.Getenv("AGENTREACH_CREDS"); creds != "" {
		// The credentials and the identity's inbox prefix, _INBOX.<name>.
		o, err := auth.ConnectOptions(creds)
		if err != nil {
			return fmt.Errorf("AGENTREACH_CREDS: %w", err)
		}
		opts = append(opts, o...)
	}
	nc, err := nats.Connect(server, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s (AGENTREACH_SERVER): %w", server, err)
	}
	defer nc.Close() // after the drain: sends what is still buffered
	log := zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	a, err := agentkit.New(nc, agentkit.Config{
		Type:          "conformance",
		ID:            id,
		MaxConcurrent: maxConcurrent,
		Version:       "1.0.0",
	}, agentkit.WithLogger(log))
	if err != nil {
		return err
	}
	w := &writes{executions: make(map[string]int)}
	for capability, h := range map[string]agentkit.Handler{
		"conformance.echo":   echo,
		"conformance.reject": reject,
		"conformance.slow":   agentkit.Typed(slow),
		"conformance.busy":   agentkit.Typed(busy),
		"conformance.write":  w.write,
	} {
		if err := a.Handle(capability, h); err != nil {
			return err
		}
	}
	return a.Run(context.Background()) // serves until SIGTERM or SIGINT, then drains
}

// echo returns the payload as it came; agentkit replies in the request's
// content type. A caller that asked for a stream gets an array's elements
// as chunks first (docs/conformance.md, stream).
func echo(ctx context.Context, req *agentkit.Request) (any, error) {
	var items []any
	if req.Streaming() && req.Decode(&items) == nil {
		for _, it := range items {
			if err := req.Send(ctx, it); err != nil {
				return nil, err
			}
		}
	}
	return req.Data, nil
}

// reject refuses every task: FAILED with BIZ_REJECT.
func reject(context.Context, *agentkit.Request) (any, error) {
	return nil, agentkit.Reject("conformance.reject refuses every task")
}

type slowInput struct {
	MS      int64 `json:"ms"`
	EveryMS int64 `json:"every_ms"`
}

type slowResult struct {
	SleptMS int64 `json:"slept_ms"`
}

// slow works for in.MS milliseconds, reporting progress every in.EveryMS.
// A payload that does not decode never gets here: agentkit.Typed answers it
// BAD_REQUEST.
func slow(ctx context.Context, req *agentkit.Request, in slowInput) (slowResult, error) {
	if in.MS < 0 || in.EveryMS < 0 {
		return slowResult{}, agentkit.BadRequest("ms and every_ms must not be negative")
	}
	done := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
	defer done.Stop()
	var progress <-chan time.Time
	if in.EveryMS > 0 {
		t := time.NewTicker(time.Duration(in.EveryMS) * time.Millisecond)
		defer t.Stop()
		progress = t.C
	}
	for {
		select {
		case <-done.C:
			return slowResult{SleptMS: in.MS}, nil
		case <-progress:
			_ = req.Progress() // best effort: a lost one only shortens the dispatcher's patience
		case <-ctx.Done():
			return slowResult{}, interrupted(ctx)
		}
	}
}

type busyInput struct {
	MS int64 `json:"ms"`
}

// busy holds its slot for in.MS milliseconds. Beyond MaxConcurrent tasks
// agentkit answers TARGET_BUSY by itself.
func busy(ctx context.Context, _ *agentkit.Request, in busyInput) (struct{}, error) {
	t := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return struct{}{}, nil
	case <-ctx.Done():
		return struct{}{}, interrupted(ctx)
	}
}

// interrupted is the error of a task whose context ended: the caller's
// deadline passed, or the agent was stopped hard.
func interrupted(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return streams.NewError(streams.CodeDeadlineExceeded, "the deadline passed while working")
	}
	return fmt.Errorf("interrupted: %w", ctx.Err())
}

// writes counts the executions of conformance.write per idempotency key.
type writes struct {
	mu         sync.Mutex
	executions map[string]int
}

type writeResult struct {
	Key        string `json:"key"`
	Executions int    `json:"executions"`
}

// write executes once per idempotency key: agentkit claims the key in
// REACH_IDEMPOTENCY, stores the result and replays it to every retry, so
// the count a result reports stays 1.
func (w *writes) write(_ context.Context, req *agentkit.Request) (any, error) {
	key := req.Header.Get(streams.HeaderIdempotencyKey)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.executions[key]++
	return writeResult{Key: key, Executions: w.executions[key]}, nil
}
