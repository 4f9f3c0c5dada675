package streams

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// OpenError wraps err, the failure to open the bucket or stream name on
// behalf of who (a package name: "registry", "dispatcher" …), with the hint
// that fits its cause, so an operator looks in the right place:
//
//   - the bucket or stream does not exist: run provisioning first
//     (`agentreach up` or a dispatcher creates them);
//   - JetStream is not enabled on the server (or for the account): nothing
//     answers on its API;
//   - JetStream did not answer in time: no stream leader, for example while a
//     cluster elects one, or an overloaded server — provisioning would not
//     help;
//   - anything else (a permissions violation, say) passes with no hint.
//
// errors.Is and errors.As still see err.
func OpenError(who, name string, err error) error {
	return fmt.Errorf("%s: open %s%s: %w", who, name, openHint(err), err)
}

func openHint(err error) string {
	switch {
	case errors.Is(err, ErrUnavailable):
		return "" // it says so itself: no leader, provisioning would not help
	case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		return " (it does not exist: run provisioning first, e.g. `agentreach up` or a dispatcher)"
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		errors.Is(err, nats.ErrNoResponders):
		return " (nothing answers on the JetStream API: JetStream is not enabled on the server, or for the account)"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return " (JetStream did not answer in time: no leader for it yet, or an overloaded server)"
	}
	return ""
}
