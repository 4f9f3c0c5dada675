package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/events"
	"github.com/agent-reach/agentreach/dispatcher/eventstats"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/metrics"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// TestEverySurfaceCountsTheSameTraffic sends mixed traffic through a real
// dispatcher with its metrics, event aggregate, fan-out service and HTTP
// gateway — calls over NATS and HTTP, calls that are retried, rejected by
// the agent or malformed, that find no agent or fail in the agent, a
// durable task, a broadcast to two instances and a fan-out of two branches
// — and checks that Prometheus (GET /metrics), reach.api.stats (what
// `agentreach stats` prints), reach.api.summary (behind `stats --by`) and
// GET /v1/stats (what the dashboard reads) all report the counts the test
// kept itself, by the counting model of docs/operations.md.
func TestEverySurfaceCountsTheSameTraffic(t *testing.T) {
	st := NewStack(t, time.Second)
	nc := st.Conn()
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := st.dispatcherOn(nc, config.Config{}, dispatcher.WithObserver(m))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(d, js)
	st.FanOut(d)
	agg, err := eventstats.New(eventstats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	follow, err := eventstats.Follow(ctx, js, streams.Subjects{}, agg, st.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(follow.Close)
	api, err := eventstats.ServeAPI(nc, streams.Subjects{}, agg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Unsubscribe() })
	g, err := gateway.New(nc, d, gateway.Config{}, gateway.WithMetrics(m), gateway.WithStats(agg))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)

	echo := func(_ context.Context, r *agentkit.Request) (any, error) { return r.Data, nil }
	st.Agent(agentkit.Config{Type: "echo", ID: "echo-1"}, map[string]agentkit.Handler{"echo": echo,
		"refuse": func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Reject("no") },
		"boom":   func(context.Context, *agentkit.Request) (any, error) { return nil, errors.New("boom") }})
	st.Agent(agentkit.Config{Type: "echo", ID: "echo-2"}, map[string]agentkit.Handler{"echo": echo})
	st.Agent(agentkit.Config{Type: "busy", ID: "busy-1"}, map[string]agentkit.Handler{
		"busy": func(context.Context, *agentkit.Request) (any, error) { return nil, agentkit.Busy("always") }})
	st.Agent(agentkit.Config{Type: "busy", ID: "busy-2"}, map[string]agentkit.Handler{"busy": echo})
	WaitRoutable(t, "echo", 2, d)
	WaitRoutable(t, "busy", 2, d)
	WaitRoutable(t, "refuse", 1, d)

	// want is what the test sent, counted by hand as it goes.
	var want events.Counts
	task := func(class events.Class, attempts int) {
		want.Tasks++
		switch class {
		case events.ClassFinished:
			want.Finished++
		case events.ClassRejected:
			want.Rejected++
		default:
			want.Failed++
		}
		want.Retries += int64(max(attempts-1, 0))
	}
	client := st.Client(agentkit.WithJSON())
	call := func(capability string, wantErr error, opts ...agentkit.CallOption) *agentkit.Result {
		t.Helper()
		r, err := client.Call(ctx, capability, []byte(`{}`), opts...)
		if !errors.Is(err, wantErr) && (wantErr != nil || err != nil) {
			t.Fatalf("call %s: %v, want %v", capability, err, wantErr)
		}
		return r
	}
	for range 5 {
		task(events.ClassFinished, 1)
		call("echo", nil)
	}
	for range 4 { // busy-1 always answers TARGET_BUSY: a call that meets it first is retried on busy-2
		r := call("busy", nil)
		if r.Attempt < 1 || r.Attempt > 3 {
			t.Fatalf("busy answered after %d attempts", r.Attempt)
		}
		task(events.ClassFinished, r.Attempt)
	}
	for range 2 {
		task(events.ClassRejected, 1)
		call("refuse", streams.ErrBizReject)
	}
	task(events.ClassRejected, 0)
	call("echo", streams.ErrBadRequest, agentkit.WithHeader(streams.HeaderAgent, "not an id!"))
	task(events.ClassRejected, 0) // a name never registered: the caller's
	call("nobody.serves.this", streams.ErrNoAgent)
	task(events.ClassFailed, 1)
	call("boom", streams.ErrInternal)
	for range 3 {
		task(events.ClassFinished, 1)
		res, err := http.Post(srv.URL+"/v1/call/echo", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("POST /v1/call/echo: %d", res.StatusCode)
		}
	}
	task(events.ClassFinished, 1)
	if _, err := client.SubmitAndWait(ctx, "echo", []byte(`{}`)); err != nil {
		t.Fatalf("durable echo: %v", err)
	}
	// A broadcast: one broadcast, a branch (and task) per echo instance.
	if gr, err := client.Broadcast(ctx, "echo", []byte(`{}`)); err != nil || gr.Expected != 2 {
		t.Fatalf("broadcast: %+v %v", gr, err)
	}
	want.Broadcasts, want.Branches = 1, 2
	task(events.ClassFinished, 1)
	task(events.ClassFinished, 1)
	// A fan-out of two branches, one rejected: one fan-out, two tasks.
	gr, err := client.FanOut(ctx, []agentkit.Branch{{Name: "a", Capability: "echo", Payload: []byte(`{}`)},
		{Name: "b", Capability: "refuse", Payload: []byte(`{}`)}})
	if !errors.Is(err, streams.ErrIncomplete) || gr == nil || gr.Expected != 2 || gr.Answered != 2 {
		t.Fatalf("fan-out: %+v %v, want INCOMPLETE with both branches answered", gr, err)
	}
	want.FanOuts, want.Branches = 1, want.Branches+2
	task(events.ClassFinished, 1)
	task(events.ClassRejected, 1)
	t.Logf("sent %+v", want)

	surfaces := map[string]func() (events.Counts, error){
		"GET /metrics": func() (events.Counts, error) { return scrapeCounts(srv.URL + "/metrics") },
		"reach.api.stats": func() (events.Counts, error) {
			var s dispatcher.Stats
			err := apiRequest(nc, streams.Subjects{}.API(dispatcher.APIStats), nil, &s)
			return s.Counts, err
		},
		"reach.api.summary": func() (events.Counts, error) {
			var s eventstats.Summary
			err := apiRequest(nc, streams.Subjects{}.API(eventstats.APISummary), []byte(`{"by":"agent"}`), &s)
			return rowCounts(s.Total), err
		},
		"GET /v1/stats (summary)": func() (events.Counts, error) {
			page, err := statsPage(srv.URL + "/v1/stats")
			if err != nil || page.Summary == nil {
				return events.Counts{}, fmt.Errorf("no summary (%v)", err)
			}
			return rowCounts(page.Summary.Total), nil
		},
		"GET /v1/stats (dispatcher)": func() (events.Counts, error) {
			page, err := statsPage(srv.URL + "/v1/stats")
			return page.Dispatcher.Counts, err
		},
	}
	for name, read := range surfaces {
		var got events.Counts
		natstest.WaitFor(t, 15*time.Second, func() error { // records travel in batches; the aggregate follows the stream
			var err error
			if got, err = read(); err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s counts %+v, want %+v", name, got, want)
			}
			return nil
		})
	}
	if s := d.Stats(); s.Overloaded != 0 || s.Dropped != 0 || s.InFlight != 0 {
		t.Errorf("refused or in flight: %+v", s)
	}
}

// rowCounts is the counting model's part of an aggregate's row.
func rowCounts(r eventstats.Row) events.Counts {
	return events.Counts{Tasks: r.Tasks, Finished: r.Finished, Rejected: r.Rejected, Failed: r.Failed, Retries: r.Retries,
		Broadcasts: r.Broadcasts, FanOuts: r.FanOuts, Branches: r.Branches}
}

func apiRequest(nc *nats.Conn, subject string, body []byte, v any) error {
	res, err := nc.Request(subject, body, 5*time.Second)
	if err != nil {
		return err
	}
	if code := res.Header.Get(streams.HeaderError); code != "" {
		return fmt.Errorf("%s: %s %s", subject, code, res.Data)
	}
	return json.Unmarshal(res.Data, v)
}

func statsPage(url string) (gateway.StatsPage, error) {
	var page gateway.StatsPage
	res, err := http.Get(url)
	if err != nil {
		return page, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return page, fmt.Errorf("GET %s: %d", url, res.StatusCode)
	}
	return page, json.NewDecoder(res.Body).Decode(&page)
}

// scrapeCounts reads the counting model's counters from a Prometheus text
// page: tasks by the class of their outcome label, retries, broadcasts and
// fan-outs (records_total by kind) and their branches.
func scrapeCounts(url string) (events.Counts, error) {
	var c events.Counts
	res, err := http.Get(url)
	if err != nil {
		return c, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return c, fmt.Errorf("GET %s: %d", url, res.StatusCode)
	}
	series, err := parseMetrics(res.Body)
	if err != nil {
		return c, err
	}
	for _, s := range series {
		n := int64(s.value)
		switch s.name {
		case "agentreach_tasks_total":
			outcome := s.labels["outcome"]
			if outcome == "finished" {
				outcome = ""
			}
			switch class := events.ClassOf(strings.ToUpper(outcome)); {
			case outcome == metrics.OutcomeUnknownName:
				c.Rejected += n
			case class == events.ClassFinished:
				c.Finished += n
			case class == events.ClassRejected:
				c.Rejected += n
			default:
				c.Failed += n
			}
			c.Tasks += n
		case "agentreach_retries_total":
			c.Retries += n
		case "agentreach_records_total":
			switch s.labels["kind"] {
			case events.KindBroadcast:
				c.Broadcasts += n
			case events.KindFanOut:
				c.FanOuts += n
			}
		case "agentreach_branches_total":
			c.Branches += n
		}
	}
	return c, nil
}

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var labelPair = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// parseMetrics reads the samples of a page in the Prometheus text format.
func parseMetrics(r io.Reader) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s := sample{name: line[:i], labels: map[string]string{}, value: v}
		if j := strings.IndexByte(s.name, '{'); j >= 0 {
			for _, m := range labelPair.FindAllStringSubmatch(s.name[j:], -1) {
				s.labels[m[1]] = m[2]
			}
			s.name = s.name[:j]
		}
		out = append(out, s)
	}
	return out, sc.Err()
}
