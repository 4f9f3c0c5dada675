package registry

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/kvwatch"
)

// WatchOption configures a Catalog or a PolicyWatcher.
type WatchOption func(*watchConfig)

type watchConfig struct {
	log       zerolog.Logger
	reconcile time.Duration
}

// WatchLogger sets the logger, where refused values are reported; the
// default discards.
func WatchLogger(l zerolog.Logger) WatchOption { return func(c *watchConfig) { c.log = l } }

// WatchReconcileInterval sets how often the whole bucket is re-read;
// default DefaultReconcileInterval (30 s).
func WatchReconcileInterval(d time.Duration) WatchOption {
	return func(c *watchConfig) {
		if d > 0 {
			c.reconcile = d
		}
	}
}

// follower keeps the last good decoded value of every key of a bucket, fed
// by kvwatch: a value that does not decode is logged once per revision and
// ignored, and the key's previous good value stays. After every change it
// calls publish, from its one goroutine, and then wakes Changed.
type follower[T any] struct {
	nc      *nats.Conn
	kv      jetstream.KeyValue
	cfg     watchConfig
	decode  func(kve jetstream.KeyValueEntry) (T, error)
	publish func(values map[string]T, revision uint64) // values is the follower's own: copy it

	// Owned by the watch goroutine.
	values   map[string]T
	revs     map[string]uint64 // revision of each good value
	rejected map[string]uint64 // revision of each key's refused value
	revision atomic.Uint64     // highest revision processed

	mu      sync.Mutex
	changed chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func newFollower[T any](js jetstream.JetStream, kv jetstream.KeyValue, opts []WatchOption,
	decode func(jetstream.KeyValueEntry) (T, error), publish func(map[string]T, uint64)) *follower[T] {
	f := &follower[T]{
		nc: js.Conn(), kv: kv, cfg: watchConfig{log: zerolog.Nop(), reconcile: DefaultReconcileInterval},
		decode: decode, publish: publish,
		values: make(map[string]T), revs: make(map[string]uint64), rejected: make(map[string]uint64),
		changed: make(chan struct{}), done: make(chan struct{}),
	}
	for _, o := range opts {
		o(&f.cfg)
	}
	return f
}

// start loads the full listing, returning once it is published (or ctx
// ends), and follows the bucket until close.
func (f *follower[T]) start(ctx context.Context) error {
	loopCtx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	ready := make(chan struct{})
	go func() {
		defer close(f.done)
		kvwatch.Run(loopCtx, f.nc, f.kv, f.cfg.reconcile, f, f.cfg.log, ready)
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		f.close()
		return ctx.Err()
	}
}

// close stops following and waits for the goroutine; idempotent.
func (f *follower[T]) close() {
	f.once.Do(func() {
		if f.cancel != nil {
			f.cancel()
			<-f.done
		}
	})
}

// Replace implements kvwatch.Handler.
func (f *follower[T]) Replace(listing map[string]jetstream.KeyValueEntry) {
	changed := false
	for key := range f.values {
		if _, ok := listing[key]; !ok {
			changed = f.remove(key) || changed
		}
	}
	for key := range f.rejected {
		if _, ok := listing[key]; !ok {
			delete(f.rejected, key)
		}
	}
	keys := slices.Sorted(maps.Keys(listing)) // log refusals in a stable order
	for _, key := range keys {
		changed = f.put(listing[key]) || changed
	}
	if changed {
		f.notify()
	}
}

// Apply implements kvwatch.Handler.
func (f *follower[T]) Apply(e jetstream.KeyValueEntry) {
	var changed bool
	if e.Operation() == jetstream.KeyValuePut {
		changed = f.put(e)
	} else {
		delete(f.rejected, e.Key())
		changed = f.remove(e.Key())
	}
	f.seen(e.Revision())
	if changed {
		f.notify()
	}
}

// put takes one stored value, reporting whether the view changed.
func (f *follower[T]) put(e jetstream.KeyValueEntry) bool {
	key, rev := e.Key(), e.Revision()
	f.seen(rev)
	if f.revs[key] == rev || f.rejected[key] == rev {
		return false // already taken or refused (a reconcile's listing)
	}
	v, err := f.decode(e)
	if err != nil {
		f.rejected[key] = rev
		_, kept := f.values[key]
		f.cfg.log.Error().Err(err).Str("bucket", f.kv.Bucket()).Str("key", key).Uint64("revision", rev).
			Bool("last_good_kept", kept).Msg("ignoring an invalid value; the last good one stays in force")
		return false
	}
	delete(f.rejected, key)
	f.values[key], f.revs[key] = v, rev
	return true
}

// remove drops a deleted or purged key, reporting whether it had a value.
func (f *follower[T]) remove(key string) bool {
	if _, ok := f.values[key]; !ok {
		return false
	}
	delete(f.values, key)
	delete(f.revs, key)
	return true
}

// seen records that revision was processed.
func (f *follower[T]) seen(revision uint64) {
	if revision > f.revision.Load() {
		f.revision.Store(revision)
	}
}

// notify publishes the values and wakes everyone waiting on Changed.
func (f *follower[T]) notify() {
	f.publish(f.values, f.revision.Load())
	f.mu.Lock()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// changes returns a channel closed at the next change.
func (f *follower[T]) changes() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// listBucket returns every live entry of kv, sorted by key.
func listBucket(ctx context.Context, kv jetstream.KeyValue) ([]jetstream.KeyValueEntry, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case kve, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("registry: listing watcher closed")
			}
			if kve == nil {
				sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
				return out, nil
			}
			out = append(out, kve)
		}
	}
}
