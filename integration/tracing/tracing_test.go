package tracing_test

// The traces a chain of calls leaves, with an in-memory exporter installed
// as the process's tracer provider.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

var exporter = tracetest.NewInMemoryExporter()

func TestMain(m *testing.M) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	otel.SetTracerProvider(tp)
	goleak.VerifyTestMain(m)
}

// spansOf returns the exported spans of trace id, waiting until there are
// at least n (a span is exported when it ends, and the last ones end
// after the reply was sent).
func spansOf(t *testing.T, id trace.TraceID, n int) []tracetest.SpanStub {
	t.Helper()
	var got []tracetest.SpanStub
	natstest.WaitFor(t, 5*time.Second, func() error {
		got = got[:0]
		for _, s := range exporter.GetSpans() {
			if s.SpanContext.TraceID() == id {
				got = append(got, s)
			}
		}
		if len(got) < n {
			return fmt.Errorf("%d spans of trace %s, want %d: %v", len(got), id, n, names(got))
		}
		return nil
	})
	return got
}

func names(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestTraceAcrossTwoHops calls a, whose handler calls b: one trace from the
// test's span through both dispatcher hops and both agents, each span the
// child of the one before, with a new span id on every hop.
func TestTraceAcrossTwoHops(t *testing.T) {
	st := integration.NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	var seenA, seenB string
	client := st.Client(agentkit.WithJSON())
	st.Agent(agentkit.Config{Type: "hop-a", ID: "a-1"}, map[string]agentkit.Handler{
		"a": func(ctx context.Context, req *agentkit.Request) (any, error) {
			seenA = req.Header.Get(streams.HeaderTraceParent)
			res, err := client.Call(ctx, "b", []byte(`{}`))
			if err != nil {
				return nil, err
			}
			return res.Data, nil
		},
	})
	st.Agent(agentkit.Config{Type: "hop-b", ID: "b-1"}, map[string]agentkit.Handler{
		"b": func(_ context.Context, req *agentkit.Request) (any, error) {
			seenB = req.Header.Get(streams.HeaderTraceParent)
			return map[string]string{"from": "b"}, nil
		},
	})
	integration.WaitRoutable(t, "a", 1, d)
	integration.WaitRoutable(t, "b", 1, d)

	ctx, root := otel.Tracer("test").Start(context.Background(), "test")
	if _, err := client.Call(ctx, "a", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	root.End()

	spans := spansOf(t, root.SpanContext().TraceID(), 9)
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	// Walk up from agent b's handler span to the root.
	var leaf tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "process reach.agent.{instance}" && attr(s, "gen_ai.agent.id") == "b-1" {
			leaf = s
		}
	}
	var chain []string
	for s, ok := leaf, leaf.Name != ""; ok; s, ok = byID[s.Parent.SpanID()] {
		chain = append([]string{s.Name + "@" + attr(s, "gen_ai.agent.id")}, chain...)
	}
	want := []string{"test@", "send reach.task.a@", "process reach.task.a@", "send reach.agent.{instance}@a-1",
		"process reach.agent.{instance}@a-1", "send reach.task.b@", "process reach.task.b@",
		"send reach.agent.{instance}@b-1", "process reach.agent.{instance}@b-1"}
	if strings.Join(chain, " > ") != strings.Join(want, " > ") {
		t.Fatalf("chain of parents:\n got  %s\n want %s", strings.Join(chain, " > "), strings.Join(want, " > "))
	}
	for _, s := range spans {
		switch s.Name {
		case "process reach.task.a", "process reach.task.b":
			if attr(s, "messaging.system") != "nats" || attr(s, "messaging.operation.type") != "process" ||
				attr(s, "gen_ai.operation.name") != "invoke_agent" || s.SpanKind != trace.SpanKindConsumer {
				t.Errorf("%s: attributes %v, kind %v", s.Name, s.Attributes, s.SpanKind)
			}
		case "send reach.agent.{instance}":
			if attr(s, "messaging.destination.name") != "reach.agent.{instance}" || attr(s, "gen_ai.agent.name") == "" ||
				attr(s, "agentreach.attempt") != "1" || s.SpanKind != trace.SpanKindProducer {
				t.Errorf("%s: attributes %v, kind %v", s.Name, s.Attributes, s.SpanKind)
			}
		}
	}
	// Each hop's traceparent names the trace and its sender's span.
	for who, tp := range map[string]string{"a": seenA, "b": seenB} {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != root.SpanContext().TraceID().String() {
			t.Errorf("agent %s got traceparent %q, want trace %s", who, tp, root.SpanContext().TraceID())
			continue
		}
		if s, ok := byID[mustSpanID(t, parts[2])]; !ok || s.Name != "send reach.agent.{instance}" {
			t.Errorf("agent %s's traceparent names span %s, not its delivery's", who, parts[2])
		}
	}
	if seenA == seenB {
		t.Error("both hops got the same traceparent")
	}
}

func mustSpanID(t *testing.T, s string) trace.SpanID {
	id, err := trace.SpanIDFromHex(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTraceOfAFailedDeliveryAndAFanOut: a fan-out's branches get spans of
// their own under the client's request, and a failure marks the spans it
// went through.
func TestTraceOfAFailedDeliveryAndAFanOut(t *testing.T) {
	st := integration.NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	st.FanOut(d)
	st.Agent(agentkit.Config{Type: "mixed", ID: "m-1"}, map[string]agentkit.Handler{
		"ok":     func(context.Context, *agentkit.Request) (any, error) { return map[string]int{"n": 1}, nil },
		"refuse": func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject("no") },
	})
	integration.WaitRoutable(t, "ok", 1, d)
	client := st.Client(agentkit.WithJSON())
	ctx, root := otel.Tracer("test").Start(context.Background(), "test")
	_, err := client.FanOut(ctx, []agentkit.Branch{{Name: "x", Capability: "ok"}, {Name: "y", Capability: "refuse"}}, agentkit.Mode("all"))
	if err == nil {
		t.Fatal("a fan-out with a refusing branch in mode all succeeded")
	}
	root.End()
	// test, the client's request, 2 branches, 2 tasks, 2 deliveries, 2 handlers
	spans := spansOf(t, root.SpanContext().TraceID(), 10)
	var request trace.SpanID
	for _, s := range spans {
		if s.Name == "send reach.fanout" && s.Parent.SpanID() == root.SpanContext().SpanID() {
			request = s.SpanContext.SpanID()
		}
	}
	var branches, failed int
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "branch ") {
			branches++
			if s.Parent.SpanID() != request || !request.IsValid() {
				t.Errorf("%s: parent %s, want the client's request span %s", s.Name, s.Parent.SpanID(), request)
			}
		}
		if attr(s, "agentreach.error.code") == "BIZ_REJECT" {
			failed++
		}
	}
	if branches != 2 {
		t.Errorf("%d branch spans, want 2: %v", branches, names(spans))
	}
	if failed < 3 { // the branch, its task, its delivery (and the handler's)
		t.Errorf("%d spans marked BIZ_REJECT, want the branch's, the task's and the delivery's at least", failed)
	}
}

// TestADroppedTraceStaysDropped: a caller whose traceparent says "not
// sampled" gets no span recorded on any hop (the provider's sampler is
// parent-based), and the decision travels: the second agent still sees
// the trace id, not sampled, instead of a new trace starting mid-chain.
func TestADroppedTraceStaysDropped(t *testing.T) {
	st := integration.NewStack(t, time.Second)
	d := st.Dispatcher(config.Config{})
	client := st.Client(agentkit.WithJSON())
	var seenB string
	st.Agent(agentkit.Config{Type: "drop-a", ID: "da-1"}, map[string]agentkit.Handler{
		"drop.a": func(ctx context.Context, _ *agentkit.Request) (any, error) {
			res, err := client.Call(ctx, "drop.b", []byte(`{}`))
			if err != nil {
				return nil, err
			}
			return res.Data, nil
		},
	})
	st.Agent(agentkit.Config{Type: "drop-b", ID: "db-1"}, map[string]agentkit.Handler{
		"drop.b": func(_ context.Context, req *agentkit.Request) (any, error) {
			seenB = req.Header.Get(streams.HeaderTraceParent)
			return map[string]int{"ok": 1}, nil
		},
	})
	integration.WaitRoutable(t, "drop.a", 1, d)
	integration.WaitRoutable(t, "drop.b", 1, d)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	if _, err := client.Call(context.Background(), "drop.a", []byte(`{}`),
		agentkit.WithHeader(streams.HeaderTraceParent, "00-"+traceID+"-00f067aa0ba902b7-00")); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(seenB, "-")
	if len(parts) != 4 || parts[1] != traceID || parts[3] != "00" {
		t.Fatalf("agent b got traceparent %q, want trace %s, not sampled", seenB, traceID)
	}
	id, _ := trace.TraceIDFromHex(traceID)
	for _, s := range exporter.GetSpans() {
		if s.SpanContext.TraceID() == id {
			t.Errorf("span %q of the dropped trace was recorded", s.Name)
		}
	}
}
