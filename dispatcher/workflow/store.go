package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
)

// A durable run's record is its state: each write checks the revision the
// writer last saw (a KV update), so two replicas that both believe they
// run a run — one slow, one that took it over after a redelivery — cannot
// both go on: the second write fails, and its replica lets the run go.

// readRun decodes a stored record and the definition it carries.
func readRun(kve jetstream.KeyValueEntry) (*Run, error) {
	r := &Run{}
	if err := json.Unmarshal(kve.Value(), r); err != nil {
		return nil, fmt.Errorf("%s %s: not a run record: %w", kve.Bucket(), kve.Key(), err)
	}
	def, err := spec.Decode(r.Definition)
	if err != nil {
		return nil, fmt.Errorf("%s %s: its definition does not validate: %w", kve.Bucket(), kve.Key(), err)
	}
	if len(r.Steps) != len(def.Steps) {
		return nil, fmt.Errorf("%s %s: %d step records for %d steps", kve.Bucket(), kve.Key(), len(r.Steps), len(def.Steps))
	}
	r.def, r.revision = def, kve.Revision()
	return r, nil
}

// GetRun returns the record of run id from REACH_RUNS (kv), or an error
// wrapping ErrNoRun.
func GetRun(ctx context.Context, kv jetstream.KeyValue, id string) (*Run, error) {
	kve, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, fmt.Errorf("%w: %s", ErrNoRun, id)
	}
	if err != nil {
		return nil, err
	}
	return readRun(kve)
}

// ListRuns returns every run REACH_RUNS (kv) holds, oldest first. A record
// that does not decode is left out and counted in skipped.
func ListRuns(ctx context.Context, kv jetstream.KeyValue) (runs []*Run, skipped int, err error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("list runs: %d read: %w", len(runs), ctx.Err())
		case kve := <-w.Updates():
			if kve == nil { // the current values have all been delivered
				sort.SliceStable(runs, func(i, j int) bool { return runs[i].Started.Before(runs[j].Started) })
				return runs, skipped, nil
			}
			r, err := readRun(kve)
			if err != nil {
				skipped++
				continue
			}
			runs = append(runs, r)
		}
	}
}

// writeRun stores r: a run not stored yet (revision 0) is created — a
// record already there means another delivery has the run, errLostRun —
// and a stored one written over the revision it was read or written at,
// errLostRun when the record has moved on.
func writeRun(ctx context.Context, kv jetstream.KeyValue, r *Run) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var rev uint64
	if r.revision == 0 {
		rev, err = kv.Create(ctx, r.ID, b)
	} else {
		rev, err = kv.Update(ctx, r.ID, b, r.revision)
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// The write may have been stored although its answer was lost
		// (a timeout, a leader change): read it back before failing.
		rev, err = reconcileRun(kv, r, b, err)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("%w (%v)", errLostRun, err)
	}
	if err != nil {
		return err
	}
	r.revision = rev
	return nil
}

// reconcileRun reads back r's record after a write of b failed with
// werr: the record as written (its revision), a record that moved on from
// the revision r was at (jetstream.ErrKeyRevisionMismatch: another
// replica's), or werr when the write did not land or cannot be told.
func reconcileRun(kv jetstream.KeyValue, r *Run, b []byte, werr error) (uint64, error) {
	ctx, cancel := bounded()
	defer cancel()
	kve, err := kv.Get(ctx, r.ID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, werr
	case err != nil:
		return 0, werr
	case bytes.Equal(kve.Value(), b):
		return kve.Revision(), nil
	case kve.Revision() != r.revision:
		return 0, jetstream.ErrKeyRevisionMismatch
	}
	return 0, werr
}
