package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/streams"
)

// The payload and header of the JSON requests the scenarios send.
var (
	SkewPayload = []byte(`{"job":"score","n":42}`)
	JSONHeader  = nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
)

// The echo stack most scenarios measure: its agents, its callers and its
// capability.
const (
	OverheadAgents  = 4
	OverheadCallers = 64
	OverheadRounds  = 5 // closed-loop rounds per point (1 in quick mode)
	EchoCapability  = "echo"
)

// StartFanOut starts the fan-out service beside ds's dispatcher, on its
// connection, with the dispatcher's profiling label.
func (r *Run) StartFanOut(ds *Dispatch) (svc *fanout.Service, err error) {
	Labelled(r.Ctx, CompDispatch, func(ctx context.Context) {
		svc, err = fanout.New(ds.NC, ds.D, fanout.Config{})
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = svc.Start(sctx)
			cancel()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("fan-out service: %w", err)
	}
	return svc, nil
}

// StopFanOut drains the service (up to 3 s).
func StopFanOut(svc *fanout.Service) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = svc.Drain(ctx) // an error means gathers were still running: Close below ends them
	_ = svc.Close()
}
