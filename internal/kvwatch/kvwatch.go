// Package kvwatch follows a KV bucket robustly: it re-creates its watcher
// whenever the connection reconnects (after a server restart a watcher may go
// silent for good), whenever the client library closes the updates channel,
// and on a fixed interval, and each time hands the handler the full listing
// the new watcher delivers, so missed updates are reconciled.
package kvwatch

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Handler receives a bucket's state. Its methods are called from one
// goroutine, never concurrently.
type Handler interface {
	// Replace gives the full listing of live keys after a watcher is
	// (re)created; keys absent from it are gone.
	Replace(listing map[string]jetstream.KeyValueEntry)
	// Apply gives one update: a put, a delete, or a purge (TTL expiry
	// arrives as a purge marker).
	Apply(e jetstream.KeyValueEntry)
}

// Run follows kv, reached through nc, until ctx ends. ready, if not nil, is
// closed after the first listing has been handed over.
func Run(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, reconcile time.Duration, h Handler, log zerolog.Logger, ready chan struct{}) {
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := watchOnce(ctx, kv, reconcile, reconnected, h, log, ready)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn().Err(err).Str("bucket", kv.Bucket()).Dur("retry_in", backoff).Msg("watch failed")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

// watchOnce runs one watcher and returns nil when it should be re-created
// (reconnected, channel closed or reconcile due).
func watchOnce(ctx context.Context, kv jetstream.KeyValue, reconcile time.Duration, reconnected <-chan nats.Status,
	h Handler, log zerolog.Logger, ready chan struct{}) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	listing := make(map[string]jetstream.KeyValueEntry) // nil once loaded
	tick := time.NewTimer(reconcile)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			return nil
		case <-reconnected:
			log.Info().Str("bucket", kv.Bucket()).Msg("reconnected; re-creating the watcher")
			return nil
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				log.Info().Str("bucket", kv.Bucket()).Msg("watcher closed; re-creating")
				return nil
			case e == nil && listing != nil:
				h.Replace(listing)
				listing = nil
				if ready != nil {
					select {
					case <-ready:
					default:
						close(ready)
					}
				}
			case e == nil:
			case listing != nil:
				if e.Operation() == jetstream.KeyValuePut {
					listing[e.Key()] = e
				} else {
					delete(listing, e.Key())
				}
			default:
				h.Apply(e)
			}
		}
	}
}
