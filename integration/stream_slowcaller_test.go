package integration

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// A caller over NATS that does not read its stream is bounded by the
// server, not the dispatcher (docs/protocol.md, Streaming results): the
// dispatcher publishes each chunk as it comes and keeps none, the server
// queues at most max_pending bytes for the caller's connection and then
// closes it as a slow consumer. Meanwhile another caller's stream finishes,
// and the dispatcher's live heap, with the stalled stream still open and
// eight times max_pending relayed to it, holds none of its chunks. The
// control: a caller that reads gets every chunk, and nobody is cut.
func TestASlowNATSCallerIsCutByTheServerNotBufferedByTheDispatcher(t *testing.T) {
	const (
		maxPending = 4 << 20
		chunkSize  = 16 << 10
		n          = 8 * maxPending / chunkSize // 32 MiB of chunks
	)
	st := NewStack(t, time.Second, func(o *server.Options) { o.MaxPending = maxPending })
	d := st.Dispatcher(config.Config{})
	release := make(chan struct{})
	body := []byte(`"` + string(make([]byte, chunkSize-2)) + `"`)
	for i := range body[1 : len(body)-1] {
		body[i+1] = 'x'
	}
	streamer(t, st, "flood-1", "flood", func(nc *nats.Conn, m *nats.Msg) {
		for i := 1; i <= n; i++ {
			c := nats.NewMsg(m.Reply)
			c.Header.Set(streams.HeaderStatus, string(streams.StatusChunk))
			c.Header.Set(streams.HeaderSeq, strconv.Itoa(i))
			c.Data = body
			_ = nc.PublishMsg(c)
		}
		if m.Header.Get(streams.HeaderRequestID) == "slow-1" {
			<-release // the stalled stream stays open while the test looks
		}
		sendFinal(nc, m, n, `"done"`)
	})
	t.Cleanup(func() { close(release) }) // before streamer's cleanup waits for the script
	streamer(t, st, "story-1", "story", words(100))
	WaitRoutable(t, "flood", 1, d)
	WaitRoutable(t, "story", 1, d)
	nc := st.Conn()

	// The control: a caller that reads gets all of it, and no connection
	// is cut.
	if msgs := streamCall(t, nc, "flood", "fast-1", true); len(msgs) != n+1 || msgs[n].Header.Get(streams.HeaderChunks) != strconv.Itoa(n) {
		t.Fatalf("a reading caller got %d messages, the last %v", len(msgs), msgs[len(msgs)-1].Header)
	}
	if c := st.Server.NumSlowConsumersClients(); c != 0 {
		t.Fatalf("%d slow consumers after a caller that reads", c)
	}
	relayed := d.Stats().ChunksRelayed
	base := liveHeap()

	// A caller that never reads its socket (a raw connection with a small
	// receive buffer), and beside it a caller that reads.
	rawStreamCaller(t, st.Server, "flood", "slow-1")
	checkStreamChunks(t, streamCall(t, nc, "story", "other-1", true), 100, "other-1", "story-1")
	natstest.WaitFor(t, 60*time.Second, func() error {
		if got := d.Stats().ChunksRelayed - relayed; got < n {
			return fmt.Errorf("%d of the stalled stream's %d chunks relayed", got, n)
		}
		if st.Server.NumSlowConsumersClients() == 0 {
			return fmt.Errorf("the server has not cut the caller that does not read")
		}
		return nil
	})
	if grew := liveHeap() - base; grew > n*chunkSize/2 {
		t.Errorf("the live heap grew %d KiB with the stalled stream open (%d KiB relayed to it)", grew>>10, n*chunkSize>>10)
	}
	if s := d.Stats(); s.StreamsOverloaded != 0 {
		t.Errorf("%d streams ended OVERLOADED: a NATS caller's stream is not buffered", s.StreamsOverloaded)
	}
}

// liveHeap is the bytes of live heap objects, after collecting twice (the
// second empties the pools' victim caches).
func liveHeap() int {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int(ms.HeapAlloc)
}

// rawStreamCaller asks for a stream of capability on a raw client
// connection with a small receive buffer, and never reads its answers.
func rawStreamCaller(t *testing.T, s *server.Server, capability, id string) {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	inbox := "_INBOX." + id
	hdr := "NATS/1.0\r\n" + streams.HeaderStream + ": 1\r\n" + streams.HeaderRequestID + ": " + id + "\r\n\r\n"
	req := `{}`
	_, err = fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1}\r\nSUB %s 1\r\nHPUB %s %s %d %d\r\n%s%s\r\n",
		inbox, streams.Subjects{}.Task(capability), inbox, len(hdr), len(hdr)+len(req), hdr, req)
	if err != nil {
		t.Fatal(err)
	}
}
