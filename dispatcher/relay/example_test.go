package relay_test

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/relay"
	"github.com/agent-reach/agentreach/streams"
)

// A stream of two chunks and its result, in order, with the count of
// chunks on the result.
func Example() {
	done := make(chan struct{})
	r := relay.New(8, func(m *nats.Msg) {
		fmt.Println(m.Header.Get(streams.HeaderStatus), m.Header.Get(streams.HeaderSeq), m.Header.Get(streams.HeaderChunks), string(m.Data))
	})
	for i, w := range []string{"once", "upon"} {
		if err := r.Push(relay.Chunk("_INBOX.caller", "req-1", "", "story-1", i+1, streams.ContentTypeJSON, []byte(`"`+w+`"`))); err != nil {
			fmt.Println(err)
		}
	}
	final := streams.StatusReply("_INBOX.caller", streams.StatusFinished, "req-1")
	final.Data = []byte(`"once upon"`)
	r.Finish(final, func() { close(done) })
	<-done
	// Output:
	// CHUNK 1  "once"
	// CHUNK 2  "upon"
	// FINISHED  2 "once upon"
}
