package integration

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

// (f) every bad input gets its code, and nothing stops serving.
func TestBadInputGetsItsCode(t *testing.T) {
	const maxPayload = 8 << 10
	st := NewStack(t, time.Second, func(o *server.Options) { o.MaxPayload = maxPayload })
	d := st.Dispatcher(config.Config{})
	st.Agent(agentkit.Config{Type: "math", ID: "math-1"}, map[string]agentkit.Handler{
		"math.add": agentkit.Typed(func(_ context.Context, _ *agentkit.Request, in addIn) (map[string]int, error) {
			return map[string]int{"sum": in.A + in.B}, nil
		}),
		"math.blowup": func(context.Context, *agentkit.Request) (any, error) {
			return bytes.Repeat([]byte("x"), maxPayload), nil
		},
	})
	WaitRoutable(t, "math.add", 1, d)
	c := st.Client()
	cj := st.Client(agentkit.WithJSON())
	raw := st.Conn()
	ctx := context.Background()

	rawReq := func(subject string, data []byte, hdr ...string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = data
		for i := 0; i+1 < len(hdr); i += 2 {
			m.Header.Set(hdr[i], hdr[i+1])
		}
		reply, err := raw.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("raw request to %s: %v", subject, err)
		}
		return reply
	}

	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"unknown capability", func() error {
			_, err := c.Call(ctx, "no.such.thing", addIn{})
			return err
		}, streams.ErrNoAgent},
		{"unknown unicast target", func() error {
			_, err := c.Call(ctx, "math.add", addIn{}, agentkit.ToAgent("ghost"))
			return err
		}, streams.ErrNoAgent},
		{"malformed JSON payload", func() error {
			_, err := cj.Call(ctx, "math.add", []byte(`{"a":"one"}`))
			return err
		}, streams.ErrBadRequest},
		{"malformed msgpack payload", func() error {
			_, err := c.Call(ctx, "math.add", []byte{0xc1, 0xff, 0x00})
			return err
		}, streams.ErrBadRequest},
		{"invalid capability in call", func() error {
			_, err := c.Call(ctx, "Math Add", addIn{})
			return err
		}, streams.ErrBadRequest},
		{"invalid capability in subject", func() error {
			return streams.ErrorFromMessage(rawReq("reach.task.Math", []byte(`{}`)))
		}, streams.ErrBadRequest},
		{"unsupported content type", func() error {
			return streams.ErrorFromMessage(rawReq("reach.task.math.add", []byte(`a=1`), streams.HeaderContentType, "text/plain"))
		}, streams.ErrBadRequest},
		{"malformed hop count", func() error {
			return streams.ErrorFromMessage(rawReq("reach.task.math.add", []byte(`{}`), streams.HeaderHops, "many"))
		}, streams.ErrBadRequest},
		{"hop limit", func() error {
			return streams.ErrorFromMessage(rawReq("reach.task.math.add", []byte(`{}`), streams.HeaderHops, "8"))
		}, streams.ErrLoopDetected},
		{"deadline already passed", func() error {
			return streams.ErrorFromMessage(rawReq("reach.task.math.add", []byte(`{}`), streams.HeaderDeadline, "1000"))
		}, streams.ErrDeadlineExceeded},
		{"payload over max_payload (client check)", func() error {
			_, err := c.Call(ctx, "math.add", bytes.Repeat([]byte("x"), maxPayload+1))
			return err
		}, streams.ErrPayloadTooLarge},
		{"payload that outgrows max_payload with delivery headers", func() error {
			// Fits as sent, but not once the dispatcher adds its headers.
			big := append(append([]byte(`"`), bytes.Repeat([]byte("x"), maxPayload-66)...), '"') // a JSON string
			return streams.ErrorFromMessage(rawReq("reach.task.math.add", big))
		}, streams.ErrPayloadTooLarge},
		{"result over max_payload", func() error {
			_, err := c.Call(ctx, "math.blowup", nil)
			return err
		}, streams.ErrPayloadTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
			t.Logf("%v", err)
			// The agent keeps serving after every bad input.
			res, err := cj.Call(ctx, "math.add", []byte(`{"a":2,"b":3}`))
			if err != nil {
				t.Fatalf("agent stopped serving: %v", err)
			}
			if string(res.Data) != `{"sum":5}` {
				t.Fatalf("got %s", res.Data)
			}
		})
	}
}

// Invalid capability names and agent records are refused at registration
// with a message that says what is wrong.
func TestInvalidRegistrationsAreRefused(t *testing.T) {
	st := NewStack(t, time.Second)
	a, err := agentkit.New(st.Conn(), agentkit.Config{Type: "math"}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Handle("Math.Add", func(context.Context, *agentkit.Request) (any, error) { return nil, nil }); !errors.Is(err, streams.ErrInvalidName) || !strings.Contains(err.Error(), "dotted lowercase") {
		t.Fatalf("want a clear ErrInvalidName, got %v", err)
	}
	if _, err := agentkit.New(st.Conn(), agentkit.Config{Type: "math", MaxConcurrent: -1}); err == nil || !strings.Contains(err.Error(), "MaxConcurrent") {
		t.Fatalf("want MaxConcurrent error, got %v", err)
	}
	if _, err := agentkit.New(st.Conn(), agentkit.Config{Type: "math", ID: "has.dot"}); !errors.Is(err, streams.ErrInvalidName) {
		t.Fatalf("want ErrInvalidName for the id, got %v", err)
	}
	if err := a.Start(context.Background()); !errors.Is(err, agentkit.ErrNoHandlers) {
		t.Fatalf("want ErrNoHandlers, got %v", err)
	}
	js, _ := jetstream.New(st.Conn())
	reg, err := registry.Open(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.Put(context.Background(), registry.Record{ID: "x-1", Type: "x", Capabilities: []string{"ok", "NOT ok"}, MaxConcurrent: 1, HeartbeatMS: 1000})
	if !errors.Is(err, registry.ErrInvalidRecord) || !strings.Contains(err.Error(), `"NOT ok"`) {
		t.Fatalf("want ErrInvalidRecord naming the capability, got %v", err)
	}
}
