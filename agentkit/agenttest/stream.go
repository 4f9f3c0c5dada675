package agenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agent-reach/agentreach/streams"
)

// streamWords is the payload of the stream rule: conformance.echo streams
// a JSON array's elements, one chunk each, when the delivery carries
// Reach-Stream: 1 (docs/conformance.md, stream).
var streamWords = []string{"once", "upon", "a", "time", "there", "was", "a", "stream"}

// checkStream delivers conformance.echo a JSON array with Reach-Stream: 1:
// the agent must send one CHUNK per element, Reach-Seq 1, 2, … in order,
// each body the element alone, then FINISHED with Reach-Chunks equal to
// their count and the whole payload as its body. The control: the same
// delivery without Reach-Stream is answered with the result alone.
func checkStream(ctx context.Context, s *suite) error {
	body := mustEncode(streams.ContentTypeJSON, streamWords)
	d, err := s.deliver(capEcho, streams.ContentTypeJSON, body, streams.HeaderStream, "1")
	if err != nil {
		return err
	}
	defer d.close()
	by := d.sent.Add(answerWithin + slack)
	var p problems
	n := 0
	for {
		r, ok := d.next(ctx, by)
		if !ok {
			return fmt.Errorf("no end of the stream within %v; saw %s", by.Sub(d.sent), d.seen())
		}
		if r.terminal() {
			switch {
			case !r.is(streams.StatusFinished):
				p.add("the stream ended %s (%s), want FINISHED", r.status(), errorOf(r))
			case r.msg.Header.Get(streams.HeaderChunks) != strconv.Itoa(n):
				p.add("the result says %s %q after %d chunks", streams.HeaderChunks, r.msg.Header.Get(streams.HeaderChunks), n)
			case !bytes.Equal(r.msg.Data, body):
				p.add("the result is %q, want the whole payload %s", r.msg.Data, body)
			}
			break
		}
		if !r.is(streams.StatusChunk) {
			continue // ACKED, PROCESSING
		}
		n++
		if seq := r.msg.Header.Get(streams.HeaderSeq); seq != strconv.Itoa(n) {
			p.add("chunk %d has %s %q", n, streams.HeaderSeq, seq)
		}
		if n <= len(streamWords) {
			var got string
			if err := json.Unmarshal(r.msg.Data, &got); err != nil || got != streamWords[n-1] {
				p.add("chunk %d is %q, want %q", n, r.msg.Data, streamWords[n-1])
			}
		}
	}
	if n != len(streamWords) {
		p.add("%d chunks for an array of %d elements", n, len(streamWords))
	}
	if err := p.err(); err != nil {
		return fmt.Errorf("%w; saw %s", err, d.seen())
	}
	// The control: no Reach-Stream, no chunk.
	plain, err := s.deliver(capEcho, streams.ContentTypeJSON, body)
	if err != nil {
		return err
	}
	defer plain.close()
	last, ok := plain.final(ctx, time.Now().Add(answerWithin+slack))
	if !ok || !last.is(streams.StatusFinished) {
		return fmt.Errorf("without %s: no FINISHED; saw %s", streams.HeaderStream, plain.seen())
	}
	for _, r := range plain.got {
		if r.is(streams.StatusChunk) {
			return fmt.Errorf("without %s the agent sent chunks: %s", streams.HeaderStream, plain.seen())
		}
	}
	return nil
}
