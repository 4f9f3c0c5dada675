package registry

import (
	"context"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// PolicyWatcher is the watched view of REACH_POLICY: the last good value of
// every key (policy.Parse), resolved into a policy.Set. A value put by hand
// that does not validate is ignored with one logged error (per key
// revision) and the key's previous good value stays in force; a delete
// removes it. A put is in force within milliseconds. Like a Table, it
// re-creates its watcher after reconnects and reconciles with a full
// listing every reconcile interval.
//
// Current reads an immutable set without locks. All methods are safe for
// concurrent use; Close is idempotent.
type PolicyWatcher struct {
	f   *follower[policy.Value]
	set atomic.Pointer[policy.Set]
}

// NewPolicyWatcher binds to REACH_POLICY, which streams.Provision creates;
// call Start to fill it.
func NewPolicyWatcher(ctx context.Context, js jetstream.JetStream, opts ...WatchOption) (*PolicyWatcher, error) {
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		return nil, streams.OpenError("registry", streams.BucketPolicy, err)
	}
	w := &PolicyWatcher{}
	w.set.Store(policy.NewSet(nil, 0))
	w.f = newFollower(js, kv, opts, func(kve jetstream.KeyValueEntry) (policy.Value, error) {
		return policy.Parse(kve.Key(), kve.Value())
	}, func(values map[string]policy.Value, revision uint64) {
		w.set.Store(policy.NewSet(values, revision))
	})
	return w, nil
}

// Start loads the full listing, returning once Current reflects it (or ctx
// ends), and keeps it current until Close.
func (w *PolicyWatcher) Start(ctx context.Context) error { return w.f.start(ctx) }

// Close stops watching and waits for the watcher's goroutine.
func (w *PolicyWatcher) Close() { w.f.close() }

// Current returns the policy in force; never nil. It takes no lock.
func (w *PolicyWatcher) Current() *policy.Set { return w.set.Load() }

// Revision is the highest REACH_POLICY revision the watcher has processed,
// whether its value was taken or refused.
func (w *PolicyWatcher) Revision() uint64 { return w.f.revision.Load() }

// Changed returns a channel closed at the next change of Current.
func (w *PolicyWatcher) Changed() <-chan struct{} { return w.f.changes() }
