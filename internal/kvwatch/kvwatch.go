// Package kvwatch follows a KV bucket robustly: it re-creates its watcher
// whenever the connection reconnects (after a server restart a watcher may go
// silent for good), whenever the client library closes the updates channel,
// when the watcher stalls (the bucket's stream holds a message it has not
// delivered for StallAfter), when the store answers again after being
// unavailable, and on a fixed interval; each time it hands the handler the
// full listing the new watcher delivers, so missed updates are reconciled.
//
// While the store is unavailable (every half second) and while a watcher
// cannot be created again after a failure (the JetStream meta leader, which
// creates consumers, is being elected after a partition heals, say), the
// handler gets the listing of a batched direct get instead (ListDirect),
// which a replica answers without a leader, unless it is older than what
// was already delivered. So it does when the watcher has left a message
// undelivered for a probe interval, before it counts as stalled; the
// watcher's updates that listing covers are then skipped.
//
// The store is probed every probe interval, and four times as often while
// it fails to answer (a STREAM.INFO of the bucket's stream, answered by its
// leader; a replicated stream whose leader does not hear a majority of its
// group counts as unavailable): a handler that implements Observer hears
// whether the store is reachable, which a registry table uses to tell an
// agent that stopped heartbeating from a store that could not take its
// heartbeats.
package kvwatch

import (
	"context"
	"errors"
	"fmt"
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

// Observer is an optional extension of Handler. Health is called, from
// the same goroutine as the Handler's methods, after every probe of the
// store (nil: its stream's leader answered) and whenever the store is
// found unavailable some other way (the connection dropped, a watcher
// could not be created, closed, or stalled).
type Observer interface {
	Health(err error)
}

// Defaults of Options.
const (
	DefaultReconcile    = 30 * time.Second
	DefaultProbe        = time.Second
	DefaultProbeTimeout = 2 * time.Second
)

// ErrStalled is the Health error of a watcher that stopped delivering.
var ErrStalled = errors.New("kvwatch: watcher stalled")

// Options tune RunWith; zero fields take the defaults.
type Options struct {
	// Reconcile is how often the watcher is re-created with a full
	// listing even when nothing went wrong; default 30 s.
	Reconcile time.Duration
	// Probe is how often the store is probed, four times as often while
	// it fails to answer; default 1 s, negative: never.
	Probe time.Duration
	// ProbeTimeout bounds one probe; default 2 s (at most half a probe
	// interval while the store fails to answer).
	ProbeTimeout time.Duration
	// StallAfter is how long the watcher may leave undelivered a message
	// the stream held at a probe before it counts as stalled; default 3
	// probe intervals.
	StallAfter time.Duration
}

func (o Options) withDefaults() Options {
	if o.Reconcile <= 0 {
		o.Reconcile = DefaultReconcile
	}
	if o.Probe == 0 {
		o.Probe = DefaultProbe
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.StallAfter <= 0 {
		o.StallAfter = 3 * max(o.Probe, 100*time.Millisecond)
	}
	return o
}

// Run follows kv, reached through nc, until ctx ends, re-creating the
// watcher every reconcile interval and probing with the defaults. ready, if
// not nil, is closed after the first listing has been handed over.
func Run(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, reconcile time.Duration, h Handler, log zerolog.Logger, ready chan struct{}) {
	RunWith(ctx, nc, kv, Options{Reconcile: reconcile}, h, log, ready)
}

// RunWith is Run with every option.
func RunWith(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, opts Options, h Handler, log zerolog.Logger, ready chan struct{}) {
	w := &watch{kv: kv, opts: opts.withDefaults(), h: h, log: log.With().Str("bucket", kv.Bucket()).Logger(), ready: ready}
	w.js, _ = jetstream.New(nc)
	w.obs, _ = h.(Observer)
	w.status = nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING)
	defer nc.RemoveStatusListener(w.status)
	w.probes = make(chan probe)
	if w.opts.Probe > 0 {
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			w.probeLoop(pctx)
		}()
	}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := w.once(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.health(err)
			w.log.Warn().Err(err).Dur("retry_in", backoff).Msg("watch failed")
			if !w.pause(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

// watch is the state of one Run.
type watch struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream // for the direct listing
	opts   Options
	h      Handler
	obs    Observer
	log    zerolog.Logger
	ready  chan struct{}
	status chan nats.Status
	probes chan probe

	down    bool // the last probe failed, or the connection is down
	recover bool // the watcher failed or went silent: list directly before a new one
	// Whether a direct listing was used, or failed or was refused, since
	// the last watcher's listing (each logged once).
	directUsed, directNoted bool
	lastRev                 uint64 // the highest stream sequence the watcher accounted for
	// The last sequence of the replica whose direct listing was handed
	// over since the watcher's own listing: every update up to it is in
	// that listing, so the watcher's are skipped.
	directRev uint64
	// The oldest stream sequence seen at a probe and not yet delivered,
	// and when it was seen: a stall when it stays undelivered.
	wantRev uint64
	wantAt  time.Time
}

// probe is one probe's answer: the stream's last sequence, or why not.
type probe struct {
	last uint64
	err  error
}

// probeLoop probes every probe interval and, while the store fails to
// answer, every quarter interval with each probe bounded to half an
// interval: a STREAM.INFO sent while the stream has no leader is never
// answered, and waiting out the full probe timeout on it left a table
// seconds behind a leader elected meanwhile.
func (w *watch) probeLoop(ctx context.Context) {
	send := func(p probe) bool {
		select {
		case <-ctx.Done():
			return false
		case w.probes <- p:
			return true
		}
	}
	next := w.opts.Probe
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		timeout := w.opts.ProbeTimeout
		if next < w.opts.Probe {
			timeout = min(timeout, max(w.opts.Probe/2, 100*time.Millisecond))
		}
		p := w.probeOnce(ctx, timeout)
		if !send(p) {
			return
		}
		next = w.opts.Probe
		if p.err != nil {
			next = w.opts.Probe / 4
		}
	}
}

func (w *watch) probeOnce(ctx context.Context, timeout time.Duration) probe {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := w.kv.Status(pctx)
	if err != nil {
		return probe{err: fmt.Errorf("probe %s: %w", w.kv.Bucket(), err)}
	}
	var last uint64
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		info := bs.StreamInfo()
		last = info.State.LastSeq
		if err := quorum(info.Cluster); err != nil {
			return probe{err: fmt.Errorf("probe %s: %w", w.kv.Bucket(), err)}
		}
	}
	return probe{last: last}
}

// peerSilence is how long a replica may go unheard by its leader and
// still count towards a quorum.
const peerSilence = 3 * time.Second

// quorum reports why a replicated stream cannot store a write now: no
// leader, or a leader that has not heard from a majority of its group
// (a leader cut off from its followers answers STREAM.INFO for seconds
// before it steps down, though nothing it is sent commits). nil for a
// stream on one server.
func quorum(c *jetstream.ClusterInfo) error {
	if c == nil || len(c.Replicas) == 0 {
		return nil
	}
	if c.Leader == "" {
		return errors.New("the stream has no leader")
	}
	alive := 1 // the leader
	for _, p := range c.Replicas {
		if p != nil && !p.Offline && !p.Pending && p.Active < peerSilence {
			alive++
		}
	}
	if need := (len(c.Replicas)+1)/2 + 1; alive < need {
		return fmt.Errorf("leader %s hears %d of the %d it needs to commit", c.Leader, alive, need)
	}
	return nil
}

// health reports to the observer, if any.
func (w *watch) health(err error) {
	if err != nil {
		w.down = true
	}
	if w.obs != nil {
		w.obs.Health(err)
	}
}

// pause waits d, still hearing probes and status changes, and ends early
// when the store answers again after failing; false when ctx ended.
func (w *watch) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case s := <-w.status:
			if s != nats.CONNECTED {
				w.health(fmt.Errorf("connection %v", s))
			}
		case p := <-w.probes:
			wasDown := w.down
			w.health(p.err)
			if p.err == nil {
				w.down = false
				if wasDown {
					return true
				}
			}
		}
	}
}

// once runs one watcher and returns nil when it should be re-created
// (reconnected, channel closed, stalled, store back, or reconcile due).
func (w *watch) once(ctx context.Context) error {
	// The stream's last sequence before the watcher starts: everything up
	// to it is in the listing or gone, so it is not waited for.
	var floor uint64
	if w.opts.Probe > 0 {
		if p := w.probeOnce(ctx, w.opts.ProbeTimeout); p.err == nil {
			floor = p.last
		}
	}
	if w.recover {
		w.listDirect(ctx)
	}
	kw, err := w.kv.WatchAll(ctx)
	if err != nil {
		w.recover = true
		return err
	}
	defer kw.Stop()
	listing := make(map[string]jetstream.KeyValueEntry) // nil once loaded
	w.wantRev, w.wantAt = 0, time.Time{}
	tick := time.NewTimer(w.opts.Reconcile)
	defer tick.Stop()
	direct := time.NewTicker(directEvery)
	defer direct.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			return nil
		case <-direct.C:
			if w.down {
				// The watcher may deliver nothing until the store has a
				// leader again; a replica may answer meanwhile.
				w.listDirect(ctx)
			}
		case s := <-w.status:
			if s != nats.CONNECTED {
				w.health(fmt.Errorf("connection %v", s))
				continue
			}
			w.log.Info().Msg("reconnected; re-creating the watcher")
			w.recover = true
			return nil
		case p := <-w.probes:
			if p.err != nil {
				if !w.down {
					w.log.Warn().Err(p.err).Msg("store unavailable")
				}
				w.health(p.err)
				continue
			}
			wasDown := w.down
			w.down = false
			if wasDown {
				// A watcher may have gone silent while the store had no
				// leader; a new one lists everything missed.
				w.log.Info().Msg("store answers again; re-creating the watcher")
				w.health(nil)
				w.recover = true
				return nil
			}
			if listing == nil && w.stalled(p.last) {
				w.log.Warn().Uint64("stream_last", p.last).Uint64("delivered", w.lastRev).Msg("watcher stalled; re-creating")
				w.health(ErrStalled)
				w.down = false // not the store: the next probe need not re-create again
				w.recover = true
				return nil
			}
			w.health(nil)
			if listing == nil && w.behind() {
				// Undelivered for a probe interval: a replica may have
				// it, while the watcher is given until StallAfter.
				w.listDirect(ctx)
			}
		case e, ok := <-kw.Updates():
			switch {
			case !ok:
				w.log.Info().Msg("watcher closed; re-creating")
				w.recover = true
				return nil
			case e == nil && listing != nil:
				w.lastRev = max(w.lastRev, floor)
				w.h.Replace(listing)
				listing = nil
				w.recover = false
				w.directUsed, w.directNoted, w.directRev = false, false, 0
				w.readied()
			case e == nil:
			case listing != nil:
				w.lastRev = max(w.lastRev, e.Revision())
				if e.Operation() == jetstream.KeyValuePut {
					listing[e.Key()] = e
				} else {
					delete(listing, e.Key())
				}
			default:
				w.lastRev = max(w.lastRev, e.Revision())
				if e.Revision() > w.directRev {
					w.h.Apply(e)
				}
			}
		}
	}
}

// behind reports whether the watcher has left a message undelivered for a
// probe interval that no direct listing has covered.
func (w *watch) behind() bool {
	return w.wantRev != 0 && w.lastRev < w.wantRev && w.directRev < w.wantRev && time.Since(w.wantAt) >= w.opts.Probe/2
}

// stalled reports whether the watcher has left a message undelivered for
// StallAfter; last is the stream's last sequence now.
func (w *watch) stalled(last uint64) bool {
	now := time.Now()
	if w.wantRev != 0 && w.lastRev >= w.wantRev {
		w.wantRev = 0
	}
	if w.wantRev == 0 {
		if last > w.lastRev {
			w.wantRev, w.wantAt = last, now
		}
		return false
	}
	return now.Sub(w.wantAt) >= w.opts.StallAfter
}

// directEvery is how often the bucket is listed by a direct get while the
// store is unavailable.
const directEvery = 500 * time.Millisecond

// directTries is how many direct listings each listing asks for, keeping
// the most current.
const directTries = 3

// readied closes ready once a first listing was handed over.
func (w *watch) readied() {
	if w.ready != nil {
		select {
		case <-w.ready:
		default:
			close(w.ready)
		}
	}
}

// listDirect hands the handler a direct listing of the bucket (no leader
// needed), unless it failed or is older than what the watchers delivered.
// The first listing handed over, and the first that failed or was refused,
// after a watcher's listing are logged.
func (w *watch) listDirect(ctx context.Context) {
	if w.js == nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, w.opts.ProbeTimeout)
	defer cancel()
	// Any replica may answer, and without a leader they stand at
	// different points: the old leader applied what it committed, a
	// follower may not have heard of the commit, a replica that was cut
	// off is behind. Ask a few times and keep the most current answer.
	var (
		l   Listing
		err error
	)
	for try := 0; try < directTries && dctx.Err() == nil; try++ {
		m, merr := ListDirect(dctx, w.js, w.kv.Bucket())
		if merr == nil && (try == 0 || err != nil || m.LastSeq > l.LastSeq) {
			l, err = m, nil
		} else if try == 0 {
			err = merr
		}
	}
	seen := max(w.lastRev, w.directRev)
	switch {
	case err != nil:
		if !w.directNoted {
			w.directNoted = true
			w.log.Info().Err(err).Msg("direct listing failed")
		}
		return
	case l.LastSeq < seen:
		if !w.directNoted {
			w.directNoted = true
			w.log.Info().Uint64("replica_last", l.LastSeq).Uint64("delivered", seen).Msg("direct listing older than what was delivered; ignored")
		}
		return
	}
	if !w.directUsed {
		w.directUsed = true
		w.log.Info().Int("keys", len(l.Entries)).Uint64("replica_last", l.LastSeq).Msg("listed by a direct get while no watcher delivers")
	}
	w.directRev = l.LastSeq
	w.h.Replace(l.Entries)
	w.readied()
}
