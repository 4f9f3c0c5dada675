package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// A chunk naming another task's request id is dropped and counted; the
// stream goes on with the agent's own chunks.
func TestAChunkOfAnotherTaskIsDropped(t *testing.T) {
	st := NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	streamer(t, st, "story-1", "story", func(nc *nats.Conn, m *nats.Msg) {
		stray := &nats.Msg{Reply: m.Reply, Header: nats.Header{}}
		stray.Header.Set(streams.HeaderRequestID, "someone-else")
		sendChunk(nc, stray, 1, `"stray"`)
		words(2)(nc, m)
	})
	WaitRoutable(t, "story", 1, d)
	msgs := streamCall(t, st.Conn(), "story", "mine-1", true)
	checkStreamChunks(t, msgs, 2, "mine-1", "story-1")
	if f := msgs[2]; f.Header.Get(streams.HeaderStatus) != "FINISHED" || f.Header.Get(streams.HeaderChunks) != "2" {
		t.Errorf("final %v", f.Header)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if s := d.Stats(); s.ChunksDropped != 1 {
			return fmt.Errorf("dropped %d chunks, want 1", s.ChunksDropped)
		}
		return nil
	})
}

// A chunk that fits the server's max_payload as the agent sent it but not
// with the dispatcher's headers ends the stream PAYLOAD_TOO_LARGE; the
// control, a chunk with room to spare, is relayed.
func TestAChunkTooLargeToRelayEndsTheStream(t *testing.T) {
	const maxPayload = 64 << 10
	st := NewStack(t, time.Second, func(o *server.Options) { o.MaxPayload = maxPayload })
	d := st.Dispatcher(config.Config{})
	streamer(t, st, "big-1", "big", func(nc *nats.Conn, m *nats.Msg) {
		var size int
		_, _ = fmt.Sscan(string(m.Data), &size)
		c := nats.NewMsg(m.Reply)
		c.Header.Set(streams.HeaderStatus, string(streams.StatusChunk))
		c.Header.Set(streams.HeaderSeq, "1")
		c.Data = []byte(`"` + strings.Repeat("x", size-2) + `"`)
		if err := nc.PublishMsg(c); err != nil {
			t.Errorf("the agent's chunk of %d bytes: %v", size, err)
		}
		sendFinal(nc, m, 1, `"done"`)
	})
	WaitRoutable(t, "big", 1, d)
	nc := st.Conn()
	for _, c := range []struct {
		size int
		want string
	}{{maxPayload - 200, string(streams.CodePayloadTooLarge)}, {maxPayload - 1000, ""}} {
		inbox := nc.NewRespInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		req := nats.NewMsg(streams.Subjects{}.Task("big"))
		req.Reply, req.Data = inbox, []byte(fmt.Sprint(c.size))
		req.Header.Set(streams.HeaderStream, "1")
		if err := nc.PublishMsg(req); err != nil {
			t.Fatal(err)
		}
		var last *nats.Msg
		for last == nil || last.Header.Get(streams.HeaderStatus) == "CHUNK" {
			if last, err = sub.NextMsg(20 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
		_ = sub.Unsubscribe()
		if got := last.Header.Get(streams.HeaderError); got != c.want {
			t.Errorf("a chunk of %d bytes: the stream ended %q %s, want %q", c.size, got, last.Data, c.want)
		}
	}
}
