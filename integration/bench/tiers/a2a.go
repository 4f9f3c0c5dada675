package tiers

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/gateway"
	"github.com/agent-reach/agentreach/dispatcher/gateway/a2a"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

// The capabilities of the agents that answer $SRV and of those that do
// not, in the micro comparison.
const (
	microCapability = "echo-micro"
	plainCapability = "echo-plain"
)

// runA2A measures, at 64 concurrent callers in closed loops, in
// alternating rounds on one stack:
//
//   - A2A SendMessage (a data part) to POST /a2a/bench against POST
//     /v1/call/echo on the same gateway, dispatcher and agents:
//     a2a_throughput_ratio, goal ≥ 0.6;
//   - routed NATS calls to agents answering $SRV (and asked for their
//     $SRV.STATS every second meanwhile, as `nats micro stats` would)
//     against as many agents that do not: micro_throughput_ratio, to be
//     about 1.
func A2A(r *harness.Run) error {
	payload := []byte(`{"text":"hello, agent"}`)
	e, err := harness.StartEnv(r.Ctx, streams.Topology{Memory: true}, false)
	if err != nil {
		return err
	}
	defer e.Close()
	agents, err := r.StartAgents(e, []string{harness.EchoCapability}, "echo", harness.OverheadAgents, 1024, echoHandler)
	if err != nil {
		return err
	}
	defer agents.Stop()
	withMicro, err := r.StartAgents(e, []string{microCapability}, "bench-micro", harness.OverheadAgents, 1024, echoHandler, ofType("bench-micro", true))
	if err != nil {
		return err
	}
	defer withMicro.Stop()
	plain, err := r.StartAgents(e, []string{plainCapability}, "bench-plain", harness.OverheadAgents, 1024, echoHandler, ofType("bench-plain", false))
	if err != nil {
		return err
	}
	defer plain.Stop()
	ds, err := r.StartDispatcher(e, config.Config{}, true)
	if err != nil {
		return err
	}
	defer ds.Stop()
	if err := r.WaitRoutable(ds, harness.EchoCapability, harness.OverheadAgents); err != nil {
		return err
	}
	for _, c := range []string{microCapability, plainCapability} {
		if err := r.WaitRoutable(ds, c, harness.OverheadAgents); err != nil {
			return err
		}
	}
	gw, err := gateway.New(ds.NC, ds.D, gateway.Config{})
	if err == nil {
		err = gw.Listen("127.0.0.1:0")
	}
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer func() { _ = gw.Shutdown(context.Background()) }()
	addr := gw.Addr().String()
	callers, err := e.ConnectN("caller", 4)
	if err != nil {
		return err
	}
	send := []byte(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER",` +
		`"parts":[{"data":` + string(payload) + `}]}}}`)
	a2aReq := []byte(fmt.Sprintf("POST /a2a/bench HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s",
		addr, a2a.HeaderVersion, a2a.ProtocolVersion, len(send), send))
	jsonHdr := nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}}
	natsLoop := func(capability, step string) (*harness.Latency, error) {
		subject := streams.Subjects{}.Task(capability)
		return r.ClosedLoop(callers, harness.ClosedSpec{Step: step, Callers: httpCallers, Dur: harness.Pick(r, 4*time.Second, 400*time.Millisecond),
			Timeout: 2 * time.Second, Build: func() *nats.Msg { return &nats.Msg{Subject: subject, Data: payload, Header: jsonHdr} }})
	}
	microLoop := func(step string) (*harness.Latency, error) {
		stop := askStatsEverySecond(callers[0])
		defer stop()
		return natsLoop(microCapability, step)
	}
	dur := harness.Pick(r, 4*time.Second, 400*time.Millisecond)
	const timeout = 2 * time.Second
	// Warm-up of every path.
	if _, err := httpLoop(r, addr, "/v1/call/"+harness.EchoCapability, payload, "warm-up http", dur/2, timeout); err != nil {
		return err
	}
	if _, err := closedLoop(r, addr, a2aReq, a2aFailure, "warm-up a2a", dur/2, timeout); err != nil {
		return err
	}
	for _, c := range []string{microCapability, plainCapability} {
		if _, err := natsLoop(c, "warm-up nats "+c); err != nil {
			return err
		}
	}
	rounds := harness.Pick(r, httpRounds, 1)
	httpRes, a2aRes, microRes, plainRes := harness.NewLatency(), harness.NewLatency(), harness.NewLatency(), harness.NewLatency()
	for round := range rounds {
		of := fmt.Sprintf("round %d of %d", round+1, rounds)
		l, err := httpLoop(r, addr, "/v1/call/"+harness.EchoCapability, payload, "http, "+of, dur, timeout)
		if err != nil {
			return err
		}
		httpRes.Add(l)
		if l, err = closedLoop(r, addr, a2aReq, a2aFailure, "a2a, "+of, dur, timeout); err != nil {
			return err
		}
		a2aRes.Add(l)
		// Which set goes first alternates: the first after the HTTP
		// rounds meets another machine than the second.
		micro := func() error {
			l, err := microLoop("agents answering $SRV, " + of)
			if err == nil {
				microRes.Add(l)
			}
			return err
		}
		plain := func() error {
			l, err := natsLoop(plainCapability, "agents without $SRV, "+of)
			if err == nil {
				plainRes.Add(l)
			}
			return err
		}
		first, second := micro, plain
		if round%2 == 1 {
			first, second = plain, micro
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	a2aRatio, microRatio := harness.Ratio(a2aRes.RPS(), httpRes.RPS()), harness.Ratio(microRes.RPS(), plainRes.RPS())
	r.Set("a2a_http_rps", httpRes.RPS())
	r.Set("a2a_rps", a2aRes.RPS())
	r.Set("a2a_throughput_ratio", a2aRatio)
	r.Set("a2a_p50_ms", harness.Millis(a2aRes.P(50)))
	r.Set("a2a_p99_ms", harness.Millis(a2aRes.P(99)))
	r.Set("a2a_failed", float64(a2aRes.Failed()))
	r.Set("a2a_cpu_us_per_task", cpuPerTask(a2aRes))
	r.Set("a2a_http_cpu_us_per_task", cpuPerTask(httpRes))
	r.Set("micro_on_rps", microRes.RPS())
	r.Set("micro_off_rps", plainRes.RPS())
	r.Set("micro_throughput_ratio", microRatio)
	r.Set("micro_on_cpu_us_per_task", cpuPerTask(microRes))
	r.Set("micro_off_cpu_us_per_task", cpuPerTask(plainRes))
	r.AddTable(fmt.Sprintf("A2A and NATS micro, %d callers, %d rounds of %v", httpCallers, rounds, dur),
		[]string{"path", "rps", "p50 ms", "p99 ms", "failed", "cpu µs/task"}, [][]string{
			latencyRow("HTTP POST /v1/call/echo", httpRes),
			latencyRow("A2A SendMessage /a2a/bench", a2aRes),
			latencyRow("NATS, agents answering $SRV", microRes),
			latencyRow("NATS, agents without $SRV", plainRes),
		})
	r.Note("A2A: a JSON-RPC SendMessage with a data part, answered as a completed task (remembered for GetTask), " +
		"from the same minimal keep-alive HTTP/1.1 client as the HTTP calls, to the same gateway, dispatcher and agents; " +
		"an answer counts only when its task completed.")
	r.Note("NATS micro: %d echo agents answering $SRV.PING, INFO and STATS (asked for their STATS every second "+
		"during their rounds) against %d started without it (Config.NoServiceDiscovery), alike otherwise, each set serving "+
		"a capability of its own on the same dispatcher; the rounds alternate which set goes first.", harness.OverheadAgents, harness.OverheadAgents)
	r.Note("Goal: answering $SRV costs agents no measurable throughput: micro_throughput_ratio %.2f, CPU per task %.1f against %.1f µs.",
		microRatio, cpuPerTask(microRes), cpuPerTask(plainRes))
	r.Goal("a2a_throughput", fmt.Sprintf("A2A SendMessage throughput at %d callers is ≥ 0.6 of POST /v1/call (%.2f)", httpCallers, a2aRatio), a2aRatio >= 0.6)
	return nil
}

// ofType makes the bench agents of type typ, answering NATS micro
// requests or not.
func ofType(typ string, micro bool) func(*agentkit.Config) {
	return func(c *agentkit.Config) { c.Type, c.NoServiceDiscovery = typ, !micro }
}

// askStatsEverySecond sends $SRV.STATS once a second on nc, collecting
// the answers, until stop.
func askStatsEverySecond(nc *nats.Conn) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				inbox := nats.NewInbox()
				sub, err := nc.SubscribeSync(inbox)
				if err != nil {
					continue
				}
				_ = nc.PublishRequest("$SRV.STATS", inbox, nil)
				for {
					if _, err := sub.NextMsg(200 * time.Millisecond); err != nil {
						break
					}
				}
				_ = sub.Unsubscribe()
			}
		}
	}()
	return func() { close(done); <-exited }
}

// a2aFailure is httpFailure, and an answer without a completed task a
// failure too.
func a2aFailure(status int, body []byte) string {
	if status != http.StatusOK || !bytes.Contains(body, []byte(string(a2a.StateCompleted))) {
		return "status " + strconv.Itoa(status) + ", not completed"
	}
	return ""
}
