package selection

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// FairShare counts the tasks each caller holds on a replica, so that one
// caller cannot take all of its MaxInFlight slots from the others.
//
// The rule: while the replica holds at most `at` tasks (Config.FairShareAt,
// default 80% of MaxInFlight), a task is admitted whoever sends it. Above
// it, a caller is admitted only while it holds fewer than its share,
// at / (callers holding tasks, itself included), at least 1. So a caller
// alone can fill the replica up to `at`, and the MaxInFlight - at slots
// above are a reserve that a caller below its share always finds free: a
// flood from one identity is refused first, the others keep being served.
//
// The counts sit in shards, each a map under its own mutex, chosen by a
// hash of the caller: O(1) per task and no lock shared by all callers. A
// caller's entry is removed when its count returns to 0, so the maps hold
// only the callers with tasks in flight (at most MaxInFlight of them).
type FairShare struct {
	at     int64
	seed   maphash.Seed
	active atomic.Int64 // callers holding at least one task
	shards [fairShards]fairShard
}

const fairShards = 64

type fairShard struct {
	mu   sync.Mutex
	held map[string]int64
	_    [48]byte // a shard per cache line: callers on other shards do not contend
}

// NewFairShare returns the counts of a replica that shares its slots
// above at tasks in flight.
func NewFairShare(at int) *FairShare {
	f := &FairShare{at: int64(at), seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i].held = make(map[string]int64)
	}
	return f
}

func (f *FairShare) shard(caller string) *fairShard {
	return &f.shards[maphash.String(f.seed, caller)%fairShards]
}

// Take counts one more task for caller, the replica holding total tasks
// with it. When total is above the mark and caller already holds its
// share, it counts nothing and returns false with what caller holds and
// its share.
func (f *FairShare) Take(caller string, total int64) (ok bool, held, share int64) {
	s := f.shard(caller)
	s.mu.Lock()
	defer s.mu.Unlock()
	held = s.held[caller]
	if total > f.at {
		callers := f.active.Load()
		if held == 0 {
			callers++ // itself
		}
		share = max(1, f.at/callers)
		if held >= share {
			return false, held, share
		}
	}
	if held == 0 {
		f.active.Add(1)
	}
	s.held[caller] = held + 1
	return true, held + 1, share
}

// Give counts one task of caller's less (one Take returned true for).
func (f *FairShare) Give(caller string) {
	s := f.shard(caller)
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.held[caller] - 1; n > 0 {
		s.held[caller] = n
		return
	}
	delete(s.held, caller)
	f.active.Add(-1)
}

// Callers returns how many callers hold tasks, and how many entries the
// counts hold (equal, unless a count went astray).
func (f *FairShare) Callers() (active int64, entries int) {
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		entries += len(s.held)
		s.mu.Unlock()
	}
	return f.active.Load(), entries
}
