// Package results reads a caller's durable results from REACH_RESULTS.
package results

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/streams"
)

// noDirectGet explains a direct get nobody answered (err): no JetStream,
// no stream, or a stream provisioned before results were read by direct
// get — which a look at the stream tells apart where the identity may
// look (a caller under auth may not: it is told the last).
func noDirectGet(ctx context.Context, js jetstream.JetStream, subject string, err error) error {
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, ierr := js.Stream(ictx, streams.StreamResults)
	switch {
	case errors.Is(ierr, jetstream.ErrStreamNotFound), errors.Is(ierr, jetstream.ErrJetStreamNotEnabled),
		errors.Is(ierr, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(ierr, nats.ErrNoResponders):
		return fmt.Errorf("agentkit: read %s: %w", subject, ierr)
	}
	return fmt.Errorf("agentkit: read %s: stream %s answers no direct get (%w): provisioning it again "+
		"(`agentreach up`, or a dispatcher's start) allows it", subject, streams.StreamResults, err)
}

// Headers a direct get adds to the stored message.
var directGetHeaders = []string{"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence"}

// Last reads the last message REACH_RESULTS holds on subject, by a
// direct get of that one subject ($JS.API.DIRECT.GET.REACH_RESULTS.<subject>,
// in js's domain $JS.<domain>.API.…) on nc: the only read of the stream a caller's permissions allow, scoped
// to its own results. jetstream.ErrMsgNotFound when there is none; js
// looks at the stream to explain a direct get nobody answers.
func Last(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, subject string) (*nats.Msg, error) {
	resp, err := nc.RequestWithContext(ctx, streams.APIPrefix(js)+"DIRECT.GET."+streams.StreamResults+"."+subject, nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, noDirectGet(ctx, js, subject, err)
	case err != nil:
		return nil, fmt.Errorf("agentkit: read %s: %w", subject, err)
	}
	switch status := resp.Header.Get("Status"); status {
	case "":
	case "404":
		return nil, jetstream.ErrMsgNotFound
	default:
		return nil, fmt.Errorf("agentkit: read %s: %s %s", subject, status, resp.Header.Get("Description"))
	}
	for _, k := range directGetHeaders {
		resp.Header.Del(k)
	}
	return &nats.Msg{Subject: subject, Header: resp.Header, Data: resp.Data}, nil
}
