package stack

import (
	"context"
	"errors"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/dispatcher/fanout"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/gateway/console"
	"github.com/agent-reach/agentreach/dispatcher/metrics"
	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/streams"
)

// node is one dispatcher replica with the services that run beside it:
// broadcast and fan-out, workflows, its metrics, the aggregate of
// REACH_EVENTS (followed from the stream, answered on reach.api.summary)
// and, with --http, the HTTP gateway (HTTPS with --http-tls or
// --http-cert).
type node struct {
	*dispatcher.Dispatcher
	fanout    *fanout.Service
	workflows *workflow.Engine
	metrics   *metrics.Metrics
	stats     *eventstats.Aggregator
	follow    *eventstats.Follower
	api       *nats.Subscription
	gateway   *gateway.Gateway // nil with --http off
	url       string           // the gateway's base URL, "" without one
}

// start creates and starts a dispatcher on nc with what runs beside it,
// the workflow engine as its resolver (started first, so the first task
// finds the definitions); with az (nil: none) every task, broadcast and
// fan-out passes az before it is routed, and the gateway's requests name
// their identity by bearer token (auth.Authorizer.Vouch). On an error
// everything started is stopped again.
func (f *dispatcherFlags) start(ctx context.Context, nc *nats.Conn, subjects streams.Subjects, log zerolog.Logger,
	az *auth.Authorizer) (_ *node, err error) {
	n := &node{}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if n.metrics, err = metrics.New(metrics.Config{}); err != nil {
		return nil, err
	}
	if n.workflows, err = workflow.New(nc, workflow.Config{}, workflow.WithLogger(log)); err != nil {
		return nil, err
	}
	opts := []dispatcher.Option{dispatcher.WithLogger(log), dispatcher.WithObserver(n.metrics), dispatcher.WithResolver(n.workflows)}
	fopts := []fanout.Option{fanout.WithLogger(log)}
	if az != nil {
		opts, fopts = append(opts, dispatcher.WithAuthorizer(az)), append(fopts, fanout.WithAuthorizer(az))
	}
	d, err := dispatcher.New(nc, f.config(subjects), opts...)
	if err != nil {
		return nil, err
	}
	if err := n.workflows.Start(ctx, d); err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	n.Dispatcher = d
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	n.metrics.Attach(d, js)
	if n.fanout, err = fanout.New(nc, d, fanout.Config{}, fopts...); err == nil {
		err = n.fanout.Start(ctx)
	}
	if err != nil {
		return nil, err
	}
	table := d.Table()
	typeOf := func(id string) string {
		if inst, ok := table.Lookup(id); ok {
			return inst.Entry().Type
		}
		return ""
	}
	if n.stats, err = eventstats.New(eventstats.Config{TypeOf: typeOf}); err != nil {
		return nil, err
	}
	if n.follow, err = eventstats.Follow(ctx, js, subjects, n.stats, log); err != nil {
		return nil, err
	}
	if n.api, err = eventstats.ServeAPI(nc, subjects, n.stats); err != nil {
		return nil, err
	}
	if f.HTTP.addr == httpOff || f.HTTP.addr == "" {
		return n, nil
	}
	gcfg, err := f.HTTP.gatewayConfig()
	if err != nil {
		return nil, err
	}
	gopts := []gateway.Option{gateway.WithLogger(log), gateway.WithMetrics(n.metrics), gateway.WithStats(n.stats)}
	ccfg := console.Config{JS: js, Subjects: subjects, Admin: f.HTTP.admin, Log: log, Stats: n.stats, Instances: func() []console.Instance {
		agents := n.gateway.Agents()
		out := make([]console.Instance, len(agents))
		for i, a := range agents {
			out[i] = console.Instance{ID: a.ID, Type: a.Type, Capabilities: a.Capabilities, Status: a.Status, Breaker: a.Breaker, Load: a.Load}
		}
		return out
	}}
	if az != nil {
		gopts = append(gopts, gateway.WithIdentifier(gateway.IdentifierFunc(func(r *http.Request, task *nats.Msg) *streams.Error {
			return az.Vouch(r.Header.Get("Authorization"), task)
		})))
		ccfg.Auth, ccfg.ReplaySign = consoleAuth{az, js}, az.SignReplay
	}
	gopts = append(gopts, gateway.WithConsole(console.New(ccfg)))
	if n.gateway, err = gateway.New(nc, d, gcfg, gopts...); err != nil {
		return nil, err
	}
	if err := n.gateway.Listen(f.HTTP.addr); err != nil {
		n.gateway = nil
		return nil, httpTaken(f.HTTP.addr, err)
	}
	n.url = n.gateway.URL()
	return n, nil
}

// URL returns the dashboard's URL, "" without HTTP.
func (n *node) URL() string { return n.url }

// Drain stops taking HTTP requests and lets those running finish, then the
// services (their branches and steps are the dispatcher's tasks; durable
// runs hand over at their next step), then the dispatcher, the workflow
// engine, and last what follows the event stream.
func (n *node) Drain(ctx context.Context) error {
	var errs []error
	if n.gateway != nil {
		errs = append(errs, n.gateway.Shutdown(ctx))
	}
	errs = append(errs, n.fanout.Drain(ctx), n.workflows.Drain(ctx), n.Dispatcher.Drain(ctx), n.workflows.Close())
	n.stopFollowing()
	return errors.Join(errs...)
}

// close stops at once whatever start had started.
func (n *node) close() {
	if n.gateway != nil {
		_ = n.gateway.Shutdown(context.Background())
	}
	if n.fanout != nil {
		_ = n.fanout.Close()
	}
	if n.Dispatcher != nil {
		_ = n.Dispatcher.Close()
	}
	if n.workflows != nil {
		_ = n.workflows.Close()
	}
	n.stopFollowing()
}

func (n *node) stopFollowing() {
	if n.api != nil {
		_ = n.api.Unsubscribe()
	}
	if n.follow != nil {
		n.follow.Close()
	}
}
