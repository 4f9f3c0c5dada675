package relay

import (
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// DefaultLimit is how many chunks a stream holds for a slow caller before
// it ends OVERLOADED (the dispatcher's Config.StreamBuffer).
const DefaultLimit = 256

// ErrSeq wraps a chunk's Reach-Seq that is not the next one: the stream
// ends INTERNAL.
var ErrSeq = errors.New("relay: chunk out of order")

// ErrTooLarge wraps a chunk that does not fit the server's max_payload with
// the caller's headers: the stream ends PAYLOAD_TOO_LARGE.
var ErrTooLarge = errors.New("relay: chunk too large to relay")

// Route is what a stream's chunks carry besides their body: the caller's
// reply subject and ids, the instance streaming (Reach-Node), and the
// task's content type, for an agent's chunk that names none.
type Route struct {
	Subject, RequestID, OrchID, Node, ContentType string
}

// Stream is one streamed task's state at the dispatcher: its relay to the
// caller, the delivery (D) it is pinned to once a chunk has come, and the
// caller's copy of a chunk. Its caller serializes every call (the
// dispatcher's task lock).
//
// A chunk's headers other than Reach-Seq stay the same for the stream, so
// they are built once, with their size: a chunk then costs a number and a
// comparison. With an Inline relay, whose sink is done with a message when
// it returns (a NATS publish copies it out), one message and one header map
// serve every chunk; a queued relay's sink gets a copy of its own.
type Stream[D comparable] struct {
	out    *Relay
	pinned D
	isPin  bool
	first  time.Time
	hdr    nats.Header // the chunk's headers; nil until the first chunk
	msg    nats.Msg    // an Inline relay's one chunk message
	ct     string      // hdr's Content-Type
	base   int         // hdr's size without Reach-Seq's value
	single bool        // out is Inline: msg is reused
}

// NewStream starts a stream relayed through out.
func NewStream[D comparable](out *Relay) *Stream[D] {
	return &Stream[D]{out: out, single: out.q == nil}
}

// Pin reports whether dl's chunks are relayed: the first delivery to send
// one pins the stream (first), and a chunk of any other (a hedge's loser)
// is dropped.
func (s *Stream[D]) Pin(dl D) (first, ok bool) {
	if s.isPin {
		return false, s.pinned == dl
	}
	s.pinned, s.isPin, s.first = dl, true, time.Now()
	return true, true
}

// Pinned returns the delivery the stream is pinned to, once a chunk came.
func (s *Stream[D]) Pinned() (D, bool) { return s.pinned, s.isPin }

// First is when the first chunk came; zero when none did.
func (s *Stream[D]) First() time.Time { return s.first }

// Sent is how many chunks were relayed.
func (s *Stream[D]) Sent() int { return s.out.Sent() }

// Relay passes the pinned delivery's chunk n (its headers h, its body data)
// to the caller: an error wrapping ErrSeq when h's Reach-Seq is not n,
// ErrTooLarge when it does not fit maxPayload with rt's headers, ErrFull
// when the caller has not taken the chunks waiting.
func (s *Stream[D]) Relay(rt Route, h nats.Header, data []byte, n int, maxPayload int64) error {
	if err := CheckSeq(h, n); err != nil {
		return kindError{ErrSeq, err}
	}
	ct := h.Get(streams.HeaderContentType)
	if ct == "" {
		ct = rt.ContentType
	}
	if s.hdr == nil || ct != s.ct {
		s.build(rt, ct)
	}
	seq := strconv.Itoa(n)
	if size := s.base + len(seq) + len(data); maxPayload > 0 && int64(size) > maxPayload {
		return kindError{ErrTooLarge, streams.CheckSize(Chunk(rt.Subject, rt.RequestID, rt.OrchID, rt.Node, n, ct, data), maxPayload)}
	}
	if s.single {
		s.hdr[streams.HeaderSeq][0] = seq
		s.msg.Data = data
		return s.out.Push(&s.msg)
	}
	out := maps.Clone(s.hdr)
	out[streams.HeaderSeq] = []string{seq}
	return s.out.Push(&nats.Msg{Subject: rt.Subject, Data: data, Header: out})
}

// kindError is err, which errors.Is also finds to be kind.
type kindError struct{ kind, err error }

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.kind, e.err} }

// build makes the chunk's headers for rt with Content-Type ct.
func (s *Stream[D]) build(rt Route, ct string) {
	s.hdr = Chunk(rt.Subject, rt.RequestID, rt.OrchID, rt.Node, 0, ct, nil).Header
	s.hdr[streams.HeaderSeq] = []string{""}
	s.ct, s.base = ct, streams.HeaderSize(&nats.Msg{Header: s.hdr})
	s.msg = nats.Msg{Subject: rt.Subject, Header: s.hdr}
}

// Finish sends the final message after the chunks (Relay.Finish).
func (s *Stream[D]) Finish(final *nats.Msg, done func()) { s.out.Finish(final, done) }
