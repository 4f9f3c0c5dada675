package registry

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/internal/kvwatch"
	"github.com/agent-reach/agentreach/streams"
)

// directBound bounds the direct listing's try before List falls back to a
// watcher.
const directBound = 2 * time.Second

// listing is one attempt of List: ListDirect, or a watcher over the
// bucket when the direct get fails.
func (r *Registry) listing(ctx context.Context) ([]Entry, error, error) {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return r.list(ctx)
	}
	dctx, cancel := context.WithTimeout(ctx, directBound)
	out, undecoded, err := listDirect(dctx, js)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return r.list(ctx)
	}
	return out, undecoded, nil
}

// ListDirect returns every live record, sorted by id, read by one batched
// direct get of REACH_AGENTS (kvwatch.ListDirect): any replica of the
// bucket answers it without a JetStream leader and without the stream info
// Open asks for, so it answers while leaders are elected after a partition
// heals (4–9 s), when List through a watcher cannot. A replica cut off from
// the others answers with what it held. Records that fail to decode are
// reported in an error wrapping ErrInvalidRecord beside the others; an error
// wrapping kvwatch.ErrDirectUnsupported means the bucket cannot be read
// this way (use Open and List).
func ListDirect(ctx context.Context, js jetstream.JetStream) ([]Entry, error) {
	out, undecoded, err := listDirect(ctx, js)
	if err != nil {
		return nil, err
	}
	return out, undecoded
}

func listDirect(ctx context.Context, js jetstream.JetStream) ([]Entry, error, error) {
	l, err := kvwatch.ListDirect(ctx, js, streams.BucketAgents)
	if err != nil {
		return nil, nil, err
	}
	out := make([]Entry, 0, len(l.Entries))
	var errs []error
	for _, kve := range l.Entries {
		e, err := toEntry(kve)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, errors.Join(errs...), nil
}
