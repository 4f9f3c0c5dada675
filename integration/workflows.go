package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/workflow"
	"github.com/agent-reach/agentreach/dispatcher/workflow/spec"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// ChildWorkflows is a dispatcher with the workflow engine beside it, as
// `agentreach dispatcher` runs one (configured like ChildDispatcher).
const ChildWorkflows = "workflows"

// WorkflowDispatcher starts a dispatcher with cfg and the workflow engine
// as its resolver, on its own connection; both stop when the test ends.
func (st *Stack) WorkflowDispatcher(cfg config.Config) (*dispatcher.Dispatcher, *workflow.Engine) {
	st.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, e, err := startWorkflows(ctx, st.Conn(), cfg, st)
	if err != nil {
		st.T.Fatal(err)
	}
	st.T.Cleanup(func() { _ = d.Close(); _ = e.Close() })
	return d, e
}

// startWorkflows starts the engine, then a dispatcher with it as resolver.
func startWorkflows(ctx context.Context, nc *nats.Conn, cfg config.Config, st *Stack) (*dispatcher.Dispatcher, *workflow.Engine, error) {
	var eopts []workflow.Option
	var dopts []dispatcher.Option
	if st != nil {
		eopts = append(eopts, workflow.WithLogger(st.log))
		dopts = append(dopts, dispatcher.WithLogger(st.log))
	}
	// Direct-tier runs are recorded too, so that tests can read them.
	e, err := workflow.New(nc, workflow.Config{DirectRecords: true}, eopts...)
	if err != nil {
		return nil, nil, err
	}
	d, err := dispatcher.New(nc, cfg, append(dopts, dispatcher.WithResolver(e))...)
	if err != nil {
		return nil, nil, err
	}
	if err := e.Start(ctx, d); err != nil {
		return nil, nil, err
	}
	if err := d.Start(ctx); err != nil {
		_ = e.Close()
		return nil, nil, err
	}
	return d, e, nil
}

// runWorkflowsChild is the ChildWorkflows role: cfg is the JSON of a
// config.Config (or empty).
func runWorkflowsChild(ctx context.Context, nc *nats.Conn, cfgJSON string) error {
	var cfg config.Config
	if cfgJSON != "" {
		if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d, e, err := startWorkflows(sctx, nc, cfg, nil)
	cancel()
	if err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Drain(dctx)
	err = d.Drain(dctx)
	_ = e.Close()
	return err
}

// PutWorkflow stores a workflow definition (YAML or JSON) in REACH_POLICY
// and waits until every engine given has it in force.
func PutWorkflow(tb testing.TB, nc *nats.Conn, doc string, engines ...*workflow.Engine) *spec.Definition {
	tb.Helper()
	def, err := spec.Parse([]byte(doc))
	if err != nil {
		tb.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		tb.Fatal(err)
	}
	rev, err := registry.PutPolicy(ctx, kv, spec.PolicyPrefix+def.Name, []byte(doc))
	if err != nil {
		tb.Fatal(err)
	}
	waitDefinition(tb, def.Name, rev, engines...)
	return def
}

// waitDefinition waits until every engine has revision rev of name in
// force.
func waitDefinition(tb testing.TB, name string, rev uint64, engines ...*workflow.Engine) {
	tb.Helper()
	natstest.WaitFor(tb, 5*time.Second, func() error {
		for i, e := range engines {
			if _, have, ok := e.Definition(name); !ok || have != rev {
				return fmt.Errorf("engine %d has workflow %s at revision %d, want %d", i, name, have, rev)
			}
		}
		return nil
	})
}
