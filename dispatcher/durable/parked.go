package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// Dead-letter replay defaults.
const (
	DefaultDeadLetterRetryInterval = time.Hour
	DefaultDeadLetterReplayRate    = 20
)

// Parked is a task held in REACH_DLQ or REACH_REVIEW.
type Parked struct {
	Stream     string      `json:"stream"`
	Seq        uint64      `json:"seq"`
	Capability string      `json:"capability"`
	RequestID  string      `json:"request_id"`
	Reason     string      `json:"reason"`
	Code       string      `json:"code"`
	LastError  string      `json:"last_error"`
	Attempts   int         `json:"attempts"`
	Count      int         `json:"count"` // how often the task was dead-lettered before
	Time       time.Time   `json:"time"`
	Header     nats.Header `json:"header"`
	Data       []byte      `json:"data"`
}

// ListParked returns every task held in stream (streams.StreamDLQ or
// streams.StreamReview), oldest first. Other streams read the same way
// (REACH_RESULTS, REACH_EVENTS: decode those with events.DecodeEvents); their
// entries have no Capability. The listing covers the stream as it was when
// the call began; entries deleted meanwhile (a replay, a purge) are left
// out. It fails rather than return a partial listing: if entries it has not
// read stay undelivered for listStall, or ctx ends first.
func ListParked(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, stream string) ([]Parked, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []Parked
	if info.State.Msgs == 0 {
		return out, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	var last uint64      // the stream sequence of the last entry read
	lastAt := time.Now() // when it arrived, or the listing began
	for {
		msg, err := it.Next(jetstream.NextMaxWait(time.Second))
		if errors.Is(err, nats.ErrTimeout) {
			// A quiet second: the listing is complete if the stream holds
			// nothing more up to where it ended at the start (entries can
			// be deleted while they are read). Otherwise delivery is slow
			// — a stream leader moving after a node left, say — so wait on.
			done, derr := drained(ctx, s, last, info.State.LastSeq)
			switch {
			case done:
				return out, nil
			case ctx.Err() != nil:
				return out, fmt.Errorf("read %s: %d entries read, more left: %w", stream, len(out), ctx.Err())
			case time.Since(lastAt) >= listStall:
				if derr == nil {
					derr = errors.New("no entry delivered")
				}
				return out, fmt.Errorf("read %s: %d entries read, more left after sequence %d, none delivered for %v: %w",
					stream, len(out), last, listStall, derr)
			}
			continue
		}
		if err != nil {
			return out, fmt.Errorf("read %s: %w", stream, err)
		}
		lastAt = time.Now()
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		md, err := msg.Metadata()
		if err != nil {
			return out, err
		}
		last = md.Sequence.Stream
		out = append(out, parkedOf(subjects, stream, md, msg.Subject(), msg.Headers(), msg.Data()))
		if md.NumPending == 0 || last >= info.State.LastSeq {
			return out, nil
		}
	}
}

// listStall bounds how long ListParked waits for entries the stream still
// holds to be delivered.
const listStall = 15 * time.Second

// drained reports whether s holds no entry after sequence last up to and
// including end; an error leaves the question open.
func drained(ctx context.Context, s jetstream.Stream, last, end uint64) (bool, error) {
	m, err := s.GetMsg(ctx, last+1, jetstream.WithGetMsgSubject(">"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return m.Sequence > end, nil
}

// GetParked returns one task held in stream by sequence.
func GetParked(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, stream string, seq uint64) (Parked, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return Parked{}, err
	}
	raw, err := s.GetMsg(ctx, seq)
	if err != nil {
		return Parked{}, err
	}
	p := parkedOf(subjects, stream, nil, raw.Subject, raw.Header, raw.Data)
	p.Seq, p.Time = raw.Sequence, raw.Time
	return p, nil
}

func parkedOf(subjects streams.Subjects, stream string, md *jetstream.MsgMetadata, subject string, h nats.Header, data []byte) Parked {
	var capability string
	switch stream {
	case streams.StreamDLQ:
		capability = subjects.CapabilityAfter("dlq", subject)
	case streams.StreamReview:
		capability = subjects.CapabilityAfter("review", subject)
	}
	p := Parked{
		Stream:     stream,
		Capability: capability,
		RequestID:  h.Get(streams.HeaderRequestID),
		Reason:     h.Get(streams.HeaderDLQReason),
		Code:       h.Get(streams.HeaderError),
		LastError:  h.Get(streams.HeaderLastError),
		Attempts:   int(streams.IntHeader(h, streams.HeaderDLQAttempts)),
		Count:      int(streams.IntHeader(h, streams.HeaderDLQCount)),
		Header:     h,
		Data:       data,
	}
	if md != nil {
		p.Seq, p.Time = md.Sequence.Stream, md.Timestamp
	}
	return p
}

// ReplayOption configures a Replay.
type ReplayOption func(*replayConfig)

type replayConfig struct {
	sign func(*nats.Msg) error
}

// ReplaySign makes Replay sign the resubmission with sign once it is
// complete. A parked entry keeps no Reach-Signature, so where auth is on a
// replay runs as its caller only when a dispatcher identity signs it:
// signature.Signer.SignReplay of the operator's dispatcher credentials
// (`agentreach dlq replay --creds`), or the dispatcher's own
// ReplaySigner. An error leaves the entry parked (ErrNotReplayable).
func ReplaySign(sign func(*nats.Msg) error) ReplayOption {
	return func(c *replayConfig) { c.sign = sign }
}

// Replay resubmits a parked task to the durable tier with its original
// headers and payload, then removes it from its stream. The task's old
// deadline is dropped (it has usually passed): a zero deadline lets the
// dispatchers apply their default from the resubmission, any other sets it.
// The resubmission is deduplicated per replay, so replicas replaying at once
// submit it once; only the one whose resubmission was stored removes the
// entry.
func Replay(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, p Parked, deadline time.Time, opts ...ReplayOption) error {
	var cfg replayConfig
	for _, o := range opts {
		o(&cfg)
	}
	if p.Capability == "" {
		return fmt.Errorf("%s seq %d: no capability in its subject", p.Stream, p.Seq)
	}
	if n := p.Header.Get(streams.HeaderDLQDropped); n != "" {
		return fmt.Errorf("%w: %s seq %d: its payload of %s bytes was too large to keep with the entry (%s); submit the task again, smaller",
			ErrNotReplayable, p.Stream, p.Seq, n, streams.HeaderDLQDropped)
	}
	m := nats.NewMsg(subjects.Submit(p.Capability))
	m.Data = p.Data
	for k, v := range p.Header {
		m.Header[k] = v
	}
	for _, k := range []string{streams.HeaderDLQReason, streams.HeaderDLQAttempts, streams.HeaderError, streams.HeaderStatus,
		streams.HeaderLastError, streams.HeaderNode, streams.HeaderDeadline, streams.HeaderSignature, streams.HeaderReplayedBy} {
		m.Header.Del(k)
	}
	if !deadline.IsZero() {
		m.Header.Set(streams.HeaderDeadline, strconv.FormatInt(deadline.UnixMilli(), 10))
	}
	m.Header.Set(streams.HeaderDLQCount, strconv.Itoa(p.Count+1))
	// Per entry (its stream and sequence, so two callers' parked tasks
	// under one id are two replays), and naming the task's caller and
	// request id, which an identity must know to pre-empt the replay with
	// a submission of its own under that id (sequences are easy to guess).
	m.Header.Set(streams.HeaderMsgID, fmt.Sprintf("replay-%s-%s-%d-%d",
		streams.SubmissionID(p.Header.Get(streams.HeaderSource), p.RequestID), p.Stream, p.Seq, p.Count+1))
	if cfg.sign != nil {
		if err := cfg.sign(m); err != nil {
			return fmt.Errorf("%w: %s seq %d: sign the replay: %v", ErrNotReplayable, p.Stream, p.Seq, err)
		}
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("resubmit %s (%s seq %d): %w", p.RequestID, p.Stream, p.Seq, err)
	}
	if ack.Duplicate {
		// Another replica replays it now (and removes it), or a publish
		// under this replay's Nats-Msg-Id came first — whose task may not
		// be this one: the entry stays rather than be lost.
		return nil
	}
	return DeleteParked(ctx, js, p.Stream, p.Seq)
}

// DeleteParked removes one entry (a resolved review, a purged dead letter).
// An entry already gone is not an error.
func DeleteParked(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}
