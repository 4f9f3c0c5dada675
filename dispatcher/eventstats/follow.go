package eventstats

import (
	"context"
	"errors"
	"fmt"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/streams"
)

// Follower feeds an Aggregator from REACH_EVENTS as records arrive: an
// ordered consumer from the start of the aggregator's window, re-created
// by the client library after a reconnect or a gap. Create it with Follow;
// Close stops it (idempotent).
type Follower struct {
	cc  jetstream.ConsumeContext
	bad func(err error)
	agg *Aggregator
}

// Follow starts feeding agg from the records on subjects' event subjects
// in REACH_EVENTS, from the start of agg's window on. A message that does
// not decode is logged and skipped (what decodes of it is kept).
func Follow(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, agg *Aggregator, log zerolog.Logger) (*Follower, error) {
	cons, err := consumer(ctx, js, subjects, agg.cfg.Now().Add(-agg.Window()))
	if err != nil {
		return nil, err
	}
	f := &Follower{agg: agg, bad: func(err error) {
		log.Warn().Err(err).Msg("REACH_EVENTS message not aggregated")
	}}
	f.cc, err = cons.Consume(func(m jetstream.Msg) { f.feed(m.Data()) },
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			log.Debug().Err(err).Msg("REACH_EVENTS consumer")
		}))
	if err != nil {
		return nil, fmt.Errorf("eventstats: consume %s: %w", streams.StreamEvents, err)
	}
	return f, nil
}

func (f *Follower) feed(data []byte) {
	evs, err := events.DecodeEvents(data)
	for i := range evs {
		f.agg.Add(&evs[i])
	}
	if err != nil {
		f.bad(err)
	}
}

// Close stops following and waits until no record is being added.
func (f *Follower) Close() {
	f.cc.Stop()
	<-f.cc.Closed()
}

// Load adds the records REACH_EVENTS holds from the start of agg's window
// up to the last one stored when it was called, and returns how many
// messages it read. It is what `agentreach stats --by` runs.
func Load(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, agg *Aggregator) (int, error) {
	cons, err := consumer(ctx, js, subjects, agg.cfg.Now().Add(-agg.Window()))
	if err != nil {
		return 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("eventstats: read %s: %w", streams.StreamEvents, err)
	}
	f := &Follower{agg: agg, bad: func(error) {}}
	n := 0
	for pending := info.NumPending; pending > 0; {
		batch, err := cons.Fetch(int(min(pending, 1000)), jetstream.FetchContext(ctx))
		if err != nil {
			return n, fmt.Errorf("eventstats: read %s: %w", streams.StreamEvents, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			n++
			f.feed(m.Data())
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return n, fmt.Errorf("eventstats: read %s: %w", streams.StreamEvents, err)
		}
		if got == 0 {
			break
		}
	}
	return n, nil
}

// consumer is an ordered consumer of the event subjects from start on.
func consumer(ctx context.Context, js jetstream.JetStream, subjects streams.Subjects, start time.Time) (jetstream.Consumer, error) {
	cons, err := js.OrderedConsumer(ctx, streams.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjects.EventWildcard()},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return nil, streams.OpenError("eventstats", streams.StreamEvents, err)
	}
	return cons, nil
}
