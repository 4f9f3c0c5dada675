package scale

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// policyOutcome is what policyChanges measured.
type policyOutcome struct {
	reps, stale, missed  int
	failed               int     // calls that failed during the timed changes
	seenP50, seenMax     float64 // ms
	routedP50, routedMax float64 // ms
}

// policyChanges puts matchShardPolicy alternately for shards 3 and 4,
// reps times after a first put it does not time, and measures each
// change: until the dispatcher's watcher reflects it, and until a call
// routed without Reach-Require comes back from the new type.
func policyChanges(r *harness.Run, ds *harness.Dispatch, kv jetstream.KeyValue, nc *nats.Conn, payload []byte, reps int) (*policyOutcome, error) {
	key := policy.KeyCapabilityPrefix + matchCapability
	subject := streams.Subjects{}.Task(matchCapability)
	hdr := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
	// call returns the node that answered, or "" for a failed call
	// (counted): before the first put the capability has no requirement,
	// and a call may go to an instance without a responder.
	failed := 0
	call := func() string {
		m, err := nc.RequestMsg(&nats.Msg{Subject: subject, Data: payload, Header: hdr}, matchTimeout)
		if err != nil || harness.IsFailure(m) {
			failed++
			return ""
		}
		return m.Header.Get(streams.HeaderNode)
	}
	// change puts shard's policy and returns when the watcher had it and
	// when a call first came back from its type (0, 0 when not in 5 s).
	change := func(shard int) (seen, routed time.Duration, stale int, err error) {
		want := fmt.Sprintf("m%02d-", 10*shard)
		prev := ds.D.Policies().Current().Revision()
		var seenAt atomic.Int64
		stop, watched := make(chan struct{}), make(chan struct{})
		stopWatch := sync.OnceFunc(func() { close(stop); <-watched })
		defer stopWatch()
		t0 := time.Now()
		go func() {
			defer close(watched)
			for {
				if ds.D.Policies().Current().Revision() > prev {
					seenAt.Store(int64(time.Since(t0)))
					return
				}
				select {
				case <-stop:
					if ds.D.Policies().Current().Revision() > prev {
						seenAt.Store(int64(time.Since(t0)))
					}
					return
				default:
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
		pctx, cancel := context.WithTimeout(r.Ctx, 5*time.Second)
		defer cancel()
		if _, err := registry.PutPolicy(pctx, kv, key, matchShardPolicy(shard)); err != nil {
			return 0, 0, 0, err
		}
		for time.Since(t0) < 5*time.Second && r.Ctx.Err() == nil {
			if strings.HasPrefix(call(), want) {
				routed = time.Since(t0)
				break
			}
		}
		if routed > 0 {
			for range 50 {
				if node := call(); node != "" && !strings.HasPrefix(node, want) {
					stale++
				}
			}
		}
		stopWatch()
		return time.Duration(seenAt.Load()), routed, stale, r.Ctx.Err()
	}
	r.Prog.Begin("match: first policy put", nil)
	if _, routed, _, err := change(3); err != nil {
		return nil, err
	} else if routed == 0 {
		return nil, errors.New("match: the first policy put was not followed by routing within 5s")
	}
	out := &policyOutcome{reps: reps}
	failed = 0 // only the timed changes' calls count
	seen, routed := harness.NewHist(), harness.NewHist()
	for i := range reps {
		r.Prog.Begin(fmt.Sprintf("match: policy change %d of %d", i+1, reps), nil)
		sv, rt, stale, err := change(4 - i%2)
		if err != nil {
			return nil, err
		}
		out.stale += stale
		if rt == 0 {
			out.missed++
			rt = 5 * time.Second
		}
		_ = seen.RecordValue(max(sv.Microseconds(), 1))
		_ = routed.RecordValue(max(rt.Microseconds(), 1))
		r.Logf("match policy change %d: watcher %v, routing %v, %d stale calls", i+1, sv, rt, stale)
	}
	out.failed = failed
	out.seenP50, out.seenMax = harness.MillisOfMicros(seen.ValueAtQuantile(50)), harness.MillisOfMicros(seen.Max())
	out.routedP50, out.routedMax = harness.MillisOfMicros(routed.ValueAtQuantile(50)), harness.MillisOfMicros(routed.Max())
	return out, nil
}
