package dispatcher

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/streams"
)

// harness is an embedded server with a started dispatcher, and instances
// that are records kept alive by real heartbeats (nothing serves their
// deliveries: the tests end before a delivery would be answered).
type harness struct {
	t   *testing.T
	nc  *nats.Conn
	js  jetstream.JetStream
	reg *registry.Registry
	d   *Dispatcher
}

func newHarness(t *testing.T, opts *server.Options, dopts ...Option) *harness {
	t.Helper()
	s := natstest.RunServerWith(t, opts)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(natstest.Connect(t, s), config.Config{DeadLetterRetryInterval: -1}, dopts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return &harness{t: t, nc: nc, js: js, reg: reg, d: d}
}

// instance registers rec (with a heartbeat) and waits until the
// dispatcher's table has it.
func (h *harness) instance(rec registry.Record) {
	h.t.Helper()
	rec.MaxConcurrent, rec.HeartbeatMS = 4, streams.DefaultHeartbeat.Milliseconds()
	hb, err := registry.NewHeartbeat(h.reg, rec, zerolog.Nop())
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hb.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = hb.Stop(context.Background(), true) })
	natstest.WaitFor(h.t, 10*time.Second, func() error {
		if _, ok := h.d.Table().Lookup(rec.ID); !ok {
			return errNotYet
		}
		return nil
	})
}

// declare stores a declaration (JSON) and waits until the dispatcher's
// catalog has it.
func (h *harness) declare(src string) {
	h.t.Helper()
	decl, err := declare.ParseDeclaration([]byte(src))
	if err != nil {
		h.t.Fatal(err)
	}
	kv, err := h.js.KeyValue(context.Background(), streams.BucketCaps)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := registry.PutDeclaration(context.Background(), kv, decl); err != nil {
		h.t.Fatal(err)
	}
	natstest.WaitFor(h.t, 10*time.Second, func() error {
		if _, ok := h.d.Catalog().Lookup(decl.Type); !ok {
			return errNotYet
		}
		return nil
	})
}

// call sends a direct-tier task and returns its error reply (nil for a
// result).
func (h *harness) call(capability string, data []byte, hdr ...string) *streams.Error {
	h.t.Helper()
	m := nats.NewMsg(streams.Subjects{}.Task(capability))
	m.Data = data
	m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	reply, err := h.nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		h.t.Fatalf("call %s: %v", capability, err)
	}
	return streams.ErrorFromMessage(reply)
}

var errNotYet = errors.New("not yet")
