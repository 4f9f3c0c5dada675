package streams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

func TestUnavailableTellsPassingFaultsFromLastingOnes(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, jetstream.ErrNoStreamResponse,
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		&jetstream.APIError{Code: 500, ErrorCode: 10118, Description: "stream is offline"},
		&nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		fmt.Errorf("open: %w", context.DeadlineExceeded)} {
		if !streams.Unavailable(err) {
			t.Errorf("%v: not unavailable", err)
		}
	}
	for _, err := range []error{nil, jetstream.ErrBucketNotFound, jetstream.ErrStreamNotFound, jetstream.ErrJetStreamNotEnabled,
		jetstream.ErrJetStreamNotEnabledForAccount, errors.New("permissions violation"), context.Canceled} {
		if streams.Unavailable(err) {
			t.Errorf("%v: unavailable", err)
		}
	}
}

func TestRetryUnavailableRetriesWithinTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := 0
	err := streams.RetryUnavailable(ctx, func(context.Context) error {
		if calls++; calls < 3 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("%v after %d calls, want success on the third", err, calls)
	}
	// A lasting fault is returned at once.
	calls = 0
	if err := streams.RetryUnavailable(ctx, func(context.Context) error { calls++; return jetstream.ErrBucketNotFound }); !errors.Is(err, jetstream.ErrBucketNotFound) || calls != 1 {
		t.Fatalf("%v after %d calls", err, calls)
	}
	// Past the deadline: ErrUnavailable, with the last cause.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	err = streams.RetryUnavailable(short, func(context.Context) error { return nats.ErrNoResponders })
	if !errors.Is(err, streams.ErrUnavailable) || !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("past the deadline: %v", err)
	}
}
