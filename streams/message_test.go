package streams_test

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// CheckSize counts what the server counts against max_payload, headers and
// body: a message at the limit passes both, one byte more is refused by
// both, and the refusal names the limit and the two parts.
func TestCheckSizeCountsHeadersAsTheServerDoes(t *testing.T) {
	const max = 2048
	opts := natstest.Options(t.TempDir())
	opts.JetStream, opts.MaxPayload = false, max
	nc := natstest.Connect(t, natstest.RunServerWith(t, opts))
	if nc.MaxPayload() != max {
		t.Fatalf("server max_payload %d, want %d", nc.MaxPayload(), max)
	}
	msg := func(body int) *nats.Msg {
		m := nats.NewMsg("size.check")
		m.Header.Set(streams.HeaderRequestID, "req-1")
		m.Header.Add("X-Twice", "a")
		m.Header.Add("X-Twice", "bb")
		m.Data = bytes.Repeat([]byte("x"), body)
		return m
	}
	hdr := streams.HeaderSize(msg(0))
	fits := msg(max - hdr)
	if err := streams.CheckSize(fits, max); err != nil {
		t.Fatalf("a message of exactly max_payload refused: %v", err)
	}
	if err := nc.PublishMsg(fits); err != nil {
		t.Fatalf("the client refuses what CheckSize passes: %v", err)
	}
	over := msg(max - hdr + 1)
	if err := nc.PublishMsg(over); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("the client sends one byte over max_payload: %v", err)
	}
	err := streams.CheckSize(over, max)
	if !errors.Is(err, streams.ErrPayloadTooLarge) {
		t.Fatalf("CheckSize passes one byte over max_payload: %v", err)
	}
	for _, part := range []string{"of " + strconv.Itoa(max+1) + " bytes", strconv.Itoa(hdr) + " of headers",
		strconv.Itoa(max-hdr+1) + " of body", "max_payload of " + strconv.Itoa(max)} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%q does not say %q", err, part)
		}
	}
	if streams.HeaderSize(nats.NewMsg("x")) != 0 || streams.CheckSize(over, 0) != nil {
		t.Error("no headers must count 0, and a max of 0 check nothing")
	}
}
