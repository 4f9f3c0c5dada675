package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// scrape returns the metrics page of h.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// TestMetricsAfterKnownTraffic sends a known set of tasks through a real
// dispatcher and agent and checks the exact counts.
func TestMetricsAfterKnownTraffic(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true, Heartbeat: time.Second})
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(nc, config.Config{Retries: config.NoRetries}, dispatcher.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	js, _ := jetstream.New(nc)
	m.Attach(d, js)

	a, err := agentkit.New(natstest.Connect(t, s), agentkit.Config{Type: "echo", ID: "echo-1"}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Handle("echo", func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil })
	_ = a.Handle("refuse", func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject("no") })
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Drain(context.Background())
	natstest.WaitFor(t, 5*time.Second, func() error {
		if d.Table().Len() != 1 {
			return fmt.Errorf("the dispatcher sees %d agents", d.Table().Len())
		}
		return nil
	})

	client, err := agentkit.NewClient(natstest.Connect(t, s), agentkit.WithJSON())
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := client.Call(ctx, "echo", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := client.Call(ctx, "refuse", []byte(`{}`)); err == nil {
			t.Fatal("refuse succeeded")
		}
	}
	if _, err := client.Call(ctx, "nobody.serves.this", []byte(`{}`)); err == nil {
		t.Fatal("a capability nobody serves answered")
	}
	if _, err := client.SubmitAndWait(ctx, "echo", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}

	wants := []string{
		`agentreach_durable_outcomes_total{capability="echo",outcome="result"} 1`,
		`agentreach_tasks_total{capability="echo",outcome="finished"} 6`,
		`agentreach_tasks_total{capability="refuse",outcome="biz_reject"} 2`,
		`agentreach_tasks_total{capability="other",outcome="no_agent_unknown"} 1`, // a name never registered
		`agentreach_task_duration_seconds_count{capability="echo"} 6`,
		`agentreach_durable_received_total 1`,
		`agentreach_in_flight 0`,
		`agentreach_registry_instances 1`,
		`agentreach_breaker_state{instance="echo-1",state="CLOSED"} 1`,
		`agentreach_breaker_state{instance="echo-1",state="OPEN"} 0`,
		`agentreach_stream_messages{stream="REACH_DLQ"} 0`,
		`agentreach_stream_messages{stream="REACH_REVIEW"} 0`,
		`agentreach_stream_messages{stream="REACH_TASKS"} 0`,
		`agentreach_policy_revision 0`,
		`go_goroutines `,
	}
	// The durable task's record, its acknowledgement (REACH_TASKS empties)
	// and its release follow its result: poll until the page shows them all.
	var page string
	err = natstest.Poll(10*time.Second, func() error {
		page = scrape(t, m.Handler())
		for _, want := range wants {
			if !strings.Contains(page, want) {
				return fmt.Errorf("no %q", want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v in the metrics:\n%s", err, grepAgentReach(page))
	}
	// The replica's own counters count the same records the same way.
	want := events.Counts{Tasks: 9, Finished: 6, Rejected: 3} // the unknown name is the caller's
	if got := d.Stats().Counts; got != want {
		t.Errorf("the replica's counts %+v, want %+v (as the metrics count)", got, want)
	}
	if strings.Contains(page, `capability="nobody.serves.this"`) {
		t.Errorf("a capability nobody offers has a label of its own")
	}
}

func grepAgentReach(page string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "agentreach_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestObservedCountsRetriesHedgesAndRecords(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	m.Observed(&events.Event{Capability: "x", Status: "FINISHED", Attempts: 3, LatencyMS: 2})
	m.Observed(&events.Event{Capability: "x", Status: "FINISHED", Attempts: 2, Hedged: true, HedgeWon: true, LatencyMS: 2})
	m.Observed(&events.Event{Capability: "fanout", Kind: "fanout", Status: "FAILED", Code: "INCOMPLETE", Expected: 3})
	m.Observed(&events.Event{Kind: "feedback"})
	m.Observed(&events.Event{Kind: "something_new"})
	m.Observed(&events.Event{Capability: "x", Outcome: "review_drop"})
	page := scrape(t, m.Handler())
	for _, want := range []string{
		// Before Attach no registry says which capability is known: "other".
		`agentreach_tasks_total{capability="other",outcome="finished"} 2`,
		`agentreach_retries_total{capability="other"} 2`,
		`agentreach_hedge_wins_total{capability="other"} 1`,
		`agentreach_records_total{kind="fanout",outcome="incomplete"} 1`,
		`agentreach_branches_total{kind="fanout"} 3`,
		`agentreach_records_total{kind="feedback",outcome="finished"} 1`,
		`agentreach_records_total{kind="other",outcome="finished"} 1`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("no %q in the metrics:\n%s", want, grepAgentReach(page))
		}
	}
	if _, err := New(Config{MaxCapabilities: -1}); err == nil {
		t.Error("New accepted MaxCapabilities -1")
	}
}

func TestStreamCounterAsksAtMostOncePerInterval(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	natstest.Provision(t, nc, streams.Topology{Memory: true})
	js, _ := jetstream.New(nc)
	c := NewStreamCounter(js, streams.Subjects{}, time.Hour)
	for range 5 {
		if got := c.Counts(); len(got.Messages) != 3 {
			t.Fatalf("counts %+v, want the three streams", got)
		}
	}
	if n := c.readCount(); n != 1 {
		t.Errorf("asked the server %d times for 5 readings within the interval, want 1", n)
	}
	c = NewStreamCounter(js, streams.Subjects{}, 0)
	c.Counts()
	c.Counts()
	if n := c.readCount(); n != 2 {
		t.Errorf("with no interval: asked %d times for 2 readings, want 2", n)
	}
}
