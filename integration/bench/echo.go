package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/streams"
)

var (
	skewPayload = []byte(`{"job":"score","n":42}`)
	jsonHeader  = nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
)

// The echo stack most scenarios measure: its agents, its callers and its
// capability.
const (
	overheadAgents  = 4
	overheadCallers = 64
	overheadRounds  = 5 // closed-loop rounds per point (1 in quick mode)
	echoCapability  = "echo"
)

// startFanOut starts the fan-out service beside ds's dispatcher, on its
// connection, with the dispatcher's profiling label.
func (r *run) startFanOut(ds *dispatch) (svc *fanout.Service, err error) {
	labelled(r.ctx, compDispatch, func(ctx context.Context) {
		svc, err = fanout.New(ds.nc, ds.d, fanout.Config{})
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

// stopFanOut drains the service (up to 3 s).
func stopFanOut(svc *fanout.Service) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = svc.Drain(ctx) // an error means gathers were still running: Close below ends them
	_ = svc.Close()
}
