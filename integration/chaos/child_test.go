//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/streams"
)

// The test binary runs as an agent in a child process (in another network
// namespace) when envChildAgent names its id.
const (
	envChildAgent  = "CHAOS_CHILD_AGENT"
	envChildURL    = "CHAOS_CHILD_URL"
	envChildRecord = "CHAOS_CHILD_RECORD"
)

// runChildAgent serves capability as agent id until killed, appending the
// idempotency key of every execution to the record file, one "key
// unix-nanoseconds kind" a line (kind: durable or direct).
func runChildAgent(id string) error {
	rec, err := os.OpenFile(os.Getenv(envChildRecord), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer rec.Close()
	opts := []nats.Option{nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(2 * time.Second), nats.RetryOnFailedConnect(true), nats.ReconnectBufSize(-1)}
	urls := os.Getenv(envChildURL)
	nc, err := nats.Connect(urls, append(opts, nats.Name(id))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	log := zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	a, err := agentkit.New(nc, agentkit.Config{Type: "chaos", ID: id, MaxConcurrent: 16}, agentkit.WithoutSignals(), agentkit.WithLogger(log))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	err = a.Handle(capability, func(_ context.Context, r *agentkit.Request) (any, error) {
		if k := r.Header.Get(streams.HeaderIdempotencyKey); k != "" {
			kind := "direct"
			if string(r.Data) == durablePayload {
				kind = "durable"
			}
			mu.Lock()
			_, err := fmt.Fprintln(rec, strings.TrimSpace(k), time.Now().UnixNano(), kind)
			mu.Unlock()
			if err != nil {
				return nil, err
			}
		}
		return r.Data, nil
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := a.Start(sctx); err != nil {
		return err
	}
	fmt.Println("agent ready")
	<-ctx.Done()
	return nil
}
