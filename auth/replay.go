package auth

import (
	"encoding/base64"
	"sync"
	"time"
)

// DefaultReplayCacheSize bounds how many accepted signatures an
// Authorizer remembers (AuthorizerConfig.ReplayCacheSize): about 50 bytes
// each, so some 50 MB at the cap.
const DefaultReplayCacheSize = 1 << 20

// replayShards splits the replay cache so that concurrent tasks seldom
// wait on one lock.
const replayShards = 16

// replayCache remembers the signatures of the messages an Authorizer
// accepted over NATS outside the durable tier (direct tasks, broadcasts,
// fan-outs, cancels, feedback), each until it is too old to verify (made +
// MaxAge): a signature seen again is a captured message re-published, and
// is refused. A signature is the MAC over its source, request id, subject
// (so its kind: a task, its cancel and its feedback share the request id,
// never the subject), time and content: a caller retrying with a fresh
// signature is a new message, a copy of an accepted one is not.
//
// Entries sit in buckets by the second the signature was made. Expired
// buckets go as time passes; at the size cap the oldest bucket goes too,
// and its second becomes the shard's floor: a signature made before the
// floor is refused, as never seen cannot be told from forgotten. So a full
// cache shortens the window in which a message is accepted (to about
// size/rate) instead of forgetting what it accepted.
type replayCache struct {
	shards [replayShards]replayShard
}

type replayShard struct {
	mu      sync.Mutex
	buckets map[int64]map[[32]byte]struct{} // made second → signatures
	n, max  int
	floor   int64 // signatures made before this unix second are refused
	swept   int64 // the unix second expired buckets were last removed
}

// replayVerdict is what the cache says of a signature.
type replayVerdict int

const (
	replayFresh    replayVerdict = iota // accepted, and now remembered
	replaySeen                          // accepted before: a replay
	replayTooEarly                      // made before the floor a full cache raised
)

func newReplayCache(size int) *replayCache {
	c := &replayCache{}
	per := max(size/replayShards, 1)
	for i := range c.shards {
		c.shards[i] = replayShard{buckets: map[int64]map[[32]byte]struct{}{}, max: per}
	}
	return c
}

// accept records the signature sig (the base64url MAC of a verified
// message, so canonical), made at made, at time now, for signatures valid
// maxAge, unless it is a replay or falls under the floor.
func (c *replayCache) accept(sig string, made, now time.Time, maxAge time.Duration) replayVerdict {
	var key [32]byte
	if n, err := base64.RawURLEncoding.Decode(key[:], []byte(sig)); err != nil || n != len(key) {
		return replaySeen // cannot happen for a verified signature; refuse rather than guess
	}
	return c.shards[key[0]%replayShards].accept(key, made.UnixMilli()/1000, now, maxAge)
}

func (s *replayShard) accept(key [32]byte, sec int64, now time.Time, maxAge time.Duration) replayVerdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	if nowSec := now.Unix(); nowSec != s.swept {
		s.swept = nowSec
		s.expire(now, maxAge)
	}
	if sec < s.floor {
		return replayTooEarly
	}
	set := s.buckets[sec]
	if _, ok := set[key]; ok {
		return replaySeen
	}
	for s.n >= s.max {
		first, found := int64(0), false
		for b := range s.buckets {
			if !found || b < first {
				first, found = b, true
			}
		}
		s.n -= len(s.buckets[first])
		delete(s.buckets, first)
		s.floor = first + 1
		if sec < s.floor {
			return replayTooEarly
		}
	}
	if set == nil {
		set = map[[32]byte]struct{}{}
		s.buckets[sec] = set
	}
	set[key] = struct{}{}
	s.n++
	return replayFresh
}

// expire drops the buckets whose every signature is older than maxAge:
// none of them verifies any more. A shard expires its buckets when a
// message reaches it in a new second.
func (s *replayShard) expire(now time.Time, maxAge time.Duration) {
	oldest := now.Add(-maxAge).UnixMilli()
	for b, set := range s.buckets {
		if (b+1)*1000 <= oldest {
			s.n -= len(set)
			delete(s.buckets, b)
		}
	}
}

// len is how many signatures the cache holds once those older than maxAge
// at now are gone (tests).
func (c *replayCache) len(now time.Time, maxAge time.Duration) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.expire(now, maxAge)
		n += s.n
		s.mu.Unlock()
	}
	return n
}
