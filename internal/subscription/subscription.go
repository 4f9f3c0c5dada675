// Package subscription makes and ends groups of NATS subscriptions, each
// with its own goroutine and pending limit (the dispatcher's task handlers
// and its inbox's shards).
package subscription

import (
	"errors"

	"github.com/nats-io/nats.go"
)

// Each makes n subscriptions with subscribe(i), each with its own
// goroutine and up to pendingBytes waiting; on an error it undoes them.
func Each(n, pendingBytes int, subscribe func(i int) (*nats.Subscription, error)) ([]*nats.Subscription, error) {
	subs := make([]*nats.Subscription, 0, n)
	for i := range n {
		sub, err := subscribe(i)
		if err == nil {
			if err = sub.SetPendingLimits(-1, pendingBytes); err != nil {
				_ = sub.Unsubscribe()
			}
		}
		if err != nil {
			_ = EndAll(subs)
			return nil, err
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

// EndAll unsubscribes subs; a closed connection has ended them already.
func EndAll(subs []*nats.Subscription) error {
	var errs []error
	for _, sub := range subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
