package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// Registry reads and writes agent records in REACH_AGENTS. It is safe for
// concurrent use.
type Registry struct {
	nc *nats.Conn
	kv jetstream.KeyValue
}

// Open binds to the REACH_AGENTS bucket, which streams.Provision creates.
func Open(ctx context.Context, js jetstream.JetStream) (*Registry, error) {
	var kv jetstream.KeyValue
	err := streams.RetryUnavailable(ctx, func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, streams.BucketAgents)
		return err
	})
	if err != nil {
		return nil, streams.OpenError("registry", streams.BucketAgents, err)
	}
	return &Registry{nc: js.Conn(), kv: kv}, nil
}

// KeyValue returns the underlying bucket.
func (r *Registry) KeyValue() jetstream.KeyValue { return r.kv }

// Put validates rec and stores it, returning the new revision. Bucket TTL
// keeps it alive for 3 heartbeats.
func (r *Registry) Put(ctx context.Context, rec Record) (uint64, error) {
	rec.Normalize()
	if err := rec.Validate(); err != nil {
		return 0, err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	return r.kv.Put(ctx, rec.ID, b)
}

// Delete removes the record of instance id (deregistration).
func (r *Registry) Delete(ctx context.Context, id string) error {
	return r.kv.Delete(ctx, id)
}

// Get returns the record of instance id, or ErrNotFound.
func (r *Registry) Get(ctx context.Context, id string) (Entry, error) {
	e, err := r.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Entry{}, err
	}
	return toEntry(e)
}

// List returns every live record, sorted by id. Records that fail to decode
// are skipped and reported in the returned error list.
//
// While the bucket has no leader (an election, a partition) the listing is
// retried until ctx ends, and then fails with streams.ErrUnavailable.
func (r *Registry) List(ctx context.Context) ([]Entry, error) {
	var out []Entry
	var undecoded error
	err := streams.RetryUnavailable(ctx, func(ctx context.Context) (err error) {
		out, undecoded, err = r.listing(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, undecoded
}

// list is one attempt of List: the records, and those that did not decode.
func (r *Registry) list(ctx context.Context) ([]Entry, error, error) {
	w, err := r.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, err
	}
	defer w.Stop()
	var out []Entry
	var errs []error
	for {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case kve, ok := <-w.Updates():
			if !ok {
				return nil, nil, errors.New("registry: listing watcher closed")
			}
			if kve == nil {
				sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
				return out, errors.Join(errs...), nil
			}
			e, err := toEntry(kve)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, e)
		}
	}
}

func toEntry(kve jetstream.KeyValueEntry) (Entry, error) {
	rec, err := DecodeRecord(kve.Value())
	if err != nil {
		return Entry{}, fmt.Errorf("key %s: %w", kve.Key(), err)
	}
	if rec.ID != kve.Key() {
		return Entry{}, fmt.Errorf("%w: key %s holds a record for id %q", ErrInvalidRecord, kve.Key(), rec.ID)
	}
	return Entry{Record: rec, Revision: kve.Revision(), Updated: kve.Created()}, nil
}
