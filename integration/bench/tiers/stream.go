package tiers

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/streams"
)

// streamCapability is the streaming agent's capability; streamAgent its
// instance, which the baseline asks directly on reach.agent.<id>.
const (
	streamCapability = "bench.stream"
	streamAgent      = "streamer-0"
)

// streamJob is what the streaming agent is asked for: n chunks of size
// bytes, pauseUS microseconds apart.
type streamJob struct {
	N       int `json:"n"`
	Size    int `json:"size"`
	PauseUS int `json:"pause_us"`
}

// Stream measures streaming results (issue 28): the time to the first
// chunk through the dispatcher against the same chunk over plain NATS
// request-reply to the agent (p50), one stream's chunk throughput through
// the dispatcher against direct, and a caller reading 10× slower than the
// agent writes: the dispatcher's memory stays bounded (the process's heap
// peak above its baseline) and the stream ends OVERLOADED while another
// caller's stream completes. One dispatcher in process, one agent.
func Stream(r *harness.Run) error {
	st, err := startStream(r)
	if err != nil {
		return err
	}
	defer st.stop()
	ds, nc := st.ds, st.nc

	// Time to first chunk: one chunk of 64 bytes, then the result; routed
	// and direct taking turns, then the floor, a bare relay, and direct.
	first := harness.Pick(r, 2000, 200)
	ttfcRouted, ttfcDirect := harness.NewLatency(), harness.NewLatency()
	ttfcRelay, ttfcDirect2 := harness.NewLatency(), harness.NewLatency()
	one := mustJSON(streamJob{N: 1, Size: 64})
	for i := range first * 4 {
		routed, into := i%2 == 0, ttfcDirect
		var via *nats.Conn
		switch {
		case i < first*2 && routed:
			into = ttfcRouted
		case i >= first*2 && routed:
			routed, via, into = false, st.relay, ttfcRelay
		case i >= first*2:
			into = ttfcDirect2
		}
		took, _, err := streamVia(r.Ctx, nc, via, routed, one)
		if err != nil {
			return err
		}
		into.Hist.RecordValue(took.Microseconds())
		into.OK++
	}
	r.Set("ttfc_routed_p50_us", harness.Micros(ttfcRouted.P(50)))
	r.Set("ttfc_direct_p50_us", harness.Micros(ttfcDirect.P(50)))
	r.Set("ttfc_p50_ratio", harness.Ratio(harness.Micros(ttfcRouted.P(50)), harness.Micros(ttfcDirect.P(50))))
	r.Set("ttfc_bare_relay_p50_us", harness.Micros(ttfcRelay.P(50)))
	r.Set("ttfc_bare_relay_p50_ratio", harness.Ratio(harness.Micros(ttfcRelay.P(50)), harness.Micros(ttfcDirect2.P(50))))

	// Throughput of one stream of small chunks, routed, direct and through
	// a bare relay taking turns: the median of each, and the range of the
	// rounds' ratios.
	chunks, rounds := harness.Pick(r, 20000, 2000), harness.Pick(r, 5, 2)
	many := mustJSON(streamJob{N: chunks, Size: 32})
	var rates [3][]float64
	var ratios []float64
	for range rounds {
		for k, routed := range []bool{true, false, false} {
			var via *nats.Conn
			if k == 2 {
				via = st.relay
			}
			_, el, err := streamVia(r.Ctx, nc, via, routed, many)
			if err != nil {
				return err
			}
			rates[k] = append(rates[k], float64(chunks)/el.Seconds())
		}
		ratios = append(ratios, harness.Ratio(rates[0][len(rates[0])-1], rates[1][len(rates[1])-1]))
	}
	routedRate, directRate, relayRate := medianOf(rates[0]), medianOf(rates[1]), medianOf(rates[2])
	r.Set("chunks_routed_per_s", routedRate)
	r.Set("chunks_direct_per_s", directRate)
	r.Set("chunks_bare_relay_per_s", relayRate)
	r.Set("chunk_throughput_ratio", harness.Ratio(routedRate, directRate))
	r.Set("chunk_throughput_ratio_min", slices.Min(ratios))
	r.Set("chunk_throughput_ratio_max", slices.Max(ratios))
	r.Set("chunk_throughput_bare_relay_ratio", harness.Ratio(relayRate, directRate))

	// A slow reader, in process (Dispatcher.Stream, as the HTTP gateway
	// uses it): the agent writes 1 KiB every 200 µs, the reader takes 2 ms
	// per chunk; beside it another caller streams at its own pace.
	peak, code, others, err := slowReader(r, ds.D)
	if err != nil {
		return err
	}
	r.Set("slow_reader_heap_peak_kib", peak)
	r.Set("slow_reader_overloaded", boolFigure(code == string(streams.CodeOverloaded)))
	r.Set("slow_reader_others_finished", boolFigure(others))
	r.Set("stream_buffer_chunks", config.DefaultStreamBuffer)

	r.AddTable("stream: summary", []string{"figure", "value"}, [][]string{
		{"time to first chunk p50, routed µs", harness.Cell(harness.Micros(ttfcRouted.P(50)))},
		{"time to first chunk p50, direct request-reply µs", harness.Cell(harness.Micros(ttfcDirect.P(50)))},
		{"ttfc_p50_ratio (goal ≤ 2)", harness.Cell(r.Rep.Figures["ttfc_p50_ratio"])},
		{"time to first chunk p50 through a bare relay µs; its ratio to direct", harness.Cell(r.Rep.Figures["ttfc_bare_relay_p50_us"]) + "; " + harness.Cell(r.Rep.Figures["ttfc_bare_relay_p50_ratio"])},
		{"chunks/s of one stream, routed (median)", harness.Cell(routedRate)},
		{"chunks/s of one stream, direct (median)", harness.Cell(directRate)},
		{"chunk_throughput_ratio (goal ≥ 0.5)", harness.Cell(r.Rep.Figures["chunk_throughput_ratio"])},
		{"  its rounds' ratios", harness.Cell(slices.Min(ratios)) + "–" + harness.Cell(slices.Max(ratios))},
		{"chunks/s through a bare relay (median); its ratio to direct", harness.Cell(relayRate) + "; " + harness.Cell(r.Rep.Figures["chunk_throughput_bare_relay_ratio"])},
		{"slow reader: heap peak above baseline, KiB", harness.Cell(peak)},
		{"slow reader: stream ended", code},
		{"slow reader: the other stream finished", strconv.FormatBool(others)},
	})
	r.Note("Time to first chunk: one caller asks for a stream of one 64-byte chunk, %d times routed (reach.task.%s with "+
		"Reach-Stream: 1, through the dispatcher) and as many direct (a plain NATS request to the same agent on "+
		"reach.agent.%s, with the headers a dispatcher sets), alternating; the time from the publish to the first chunk "+
		"(the agent's ACKED before it not counted). Then the floor: as many through a bare relay (below), both ways, "+
		"alternating with direct again.", first, streamCapability, streamAgent)
	r.Note("Throughput: one stream of %d chunks of 32 bytes, written as fast as the agent can, routed, direct, and "+
		"direct through a bare relay (a NATS subscription on a connection of its own that adds Reach-Node and "+
		"Reach-Orchestration-Id to the agent's message and publishes it on: the floor of any relay), %d rounds; chunks "+
		"per second from the publish to the final message, the median of the rounds.", chunks, rounds)
	r.Note("Slow reader: Dispatcher.Stream with a reader taking 2 ms per chunk while the agent writes 1 KiB every 200 µs "+
		"(10× faster); the dispatcher holds at most %d chunks per stream (Config.StreamBuffer), then ends the stream "+
		"OVERLOADED and cancels the agent. The heap peak is the whole process's (dispatcher, agent, server) above its "+
		"level before the stream, sampled every 5 ms; another caller's 100-chunk stream runs meanwhile.", config.DefaultStreamBuffer)
	return nil
}

func medianOf(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

func boolFigure(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// streamHandler is the agent's capability: job.N chunks through
// Request.Send, then the count as the result (not the chunks again: the
// measure is of the chunks).
func streamHandler(ctx context.Context, req *agentkit.Request) (any, error) {
	var job streamJob
	if err := req.Decode(&job); err != nil {
		return nil, err
	}
	chunk := make([]byte, job.Size)
	for i := range chunk {
		chunk[i] = 'x'
	}
	for range job.N {
		if job.PauseUS > 0 {
			time.Sleep(time.Duration(job.PauseUS) * time.Microsecond)
		}
		if err := req.Send(ctx, chunk); err != nil {
			return nil, err
		}
	}
	return map[string]int{"chunks": job.N}, nil
}

// streamStack is the scenario's system: a server, the streaming agent, a
// dispatcher in process and a caller's connection.
type streamStack struct {
	ds        *harness.Dispatch
	nc, relay *nats.Conn
	stop      func()
}

func startStream(r *harness.Run) (*streamStack, error) {
	e, err := harness.StartEnv(r.Ctx, streams.Topology{}, false)
	if err != nil {
		return nil, err
	}
	agents, err := r.StartAgents(e, []string{streamCapability}, "streamer", 1, 64, func(int) agentkit.Handler { return streamHandler })
	if err != nil {
		e.Close()
		return nil, err
	}
	ds, err := r.StartDispatcher(e, config.Config{}, false)
	if err != nil {
		agents.Stop()
		e.Close()
		return nil, err
	}
	stop := func() {
		ds.Stop()
		agents.Stop()
		e.Close()
	}
	if err := r.WaitRoutable(ds, streamCapability, 1); err != nil {
		stop()
		return nil, err
	}
	conns, err := e.ConnectN("caller", 2)
	if err != nil {
		stop()
		return nil, err
	}
	return &streamStack{ds: ds, nc: conns[0], relay: conns[1], stop: stop}, nil
}

// streamOnce sends one streamed task, routed or direct, and reads it to
// its final message: the time to the first message and to the last.
func streamOnce(ctx context.Context, nc *nats.Conn, routed bool, job []byte) (first, all time.Duration, err error) {
	return streamVia(ctx, nc, nil, routed, job)
}

// streamVia is streamOnce; with a relay connection rc, a direct stream
// goes through a bare relay on rc both ways: the request on to the agent,
// and each message back (its ACKED dropped) with the two headers a
// dispatcher adds to the agent's (Reach-Node, Reach-Orchestration-Id) —
// the least any relay through a NATS client does.
func streamVia(ctx context.Context, nc, rc *nats.Conn, routed bool, job []byte) (first, all time.Duration, err error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	m := &nats.Msg{Subject: streams.Subjects{}.Task(streamCapability), Reply: inbox, Data: job, Header: nats.Header{}}
	m.Header.Set(streams.HeaderContentType, streams.ContentTypeJSON)
	m.Header.Set(streams.HeaderStream, "1")
	if !routed { // to the agent as a dispatcher delivers
		m.Subject = streams.Subjects{}.Agent(streamAgent)
		m.Header.Set(streams.HeaderCapability, streamCapability)
		m.Header.Set(streams.HeaderRequestID, streams.NewRequestID())
		m.Header.Set(streams.HeaderAttempt, "1")
	}
	if rc != nil && !routed {
		in, back := rc.NewRespInbox(), rc.NewRespInbox()
		for subj, fwd := range map[string]func(*nats.Msg){
			in: func(q *nats.Msg) { q.Subject, q.Reply = streams.Subjects{}.Agent(streamAgent), back },
			back: func(a *nats.Msg) {
				a.Header[streams.HeaderNode], a.Header[streams.HeaderOrchestrationID] = []string{streamAgent}, []string{"orch"}
				a.Subject, a.Reply = inbox, ""
			},
		} {
			rs, err := rc.Subscribe(subj, func(x *nats.Msg) {
				if x.Header.Get(streams.HeaderStatus) != string(streams.StatusAcked) {
					fwd(x)
					_ = rc.PublishMsg(x)
				}
			})
			if err != nil {
				return 0, 0, err
			}
			defer func() { _ = rs.Unsubscribe() }()
			_ = rs.SetPendingLimits(-1, -1)
		}
		if err := rc.Flush(); err != nil {
			return 0, 0, err
		}
		m.Subject = in
	}
	start := time.Now()
	if err := nc.PublishMsg(m); err != nil {
		return 0, 0, err
	}
	for n := 0; ; n++ {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := sub.NextMsgWithContext(ctx)
		cancel()
		if err != nil {
			return 0, 0, fmt.Errorf("stream (routed %v): after %d messages: %w", routed, n, err)
		}
		st := streams.Status(got.Header.Get(streams.HeaderStatus))
		if st == streams.StatusAcked || st == streams.StatusProcessing {
			continue
		}
		if first == 0 {
			first = time.Since(start)
		}
		if st != streams.StatusChunk {
			if e := streams.ErrorFromMessage(got); e != nil {
				return 0, 0, fmt.Errorf("stream (routed %v): %w", routed, e)
			}
			return first, time.Since(start), nil
		}
	}
}

// slowReader runs the slow-reader case and reports the heap peak above
// the baseline in KiB, how the slow stream ended, and whether the other
// caller's stream finished.
func slowReader(r *harness.Run, d *dispatcher.Dispatcher) (peakKiB float64, code string, othersOK bool, err error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(r.Ctx, 60*time.Second)
	defer cancel()
	otherDone := make(chan bool, 1)
	go func() {
		msg := &nats.Msg{Header: nats.Header{}, Data: mustJSON(streamJob{N: 100, Size: 1024, PauseUS: 1000})}
		final := d.Stream(ctx, streamCapability, msg, func(*nats.Msg) {})
		otherDone <- final.Header.Get(streams.HeaderError) == ""
	}()
	msg := &nats.Msg{Header: nats.Header{}, Data: mustJSON(streamJob{N: 20000, Size: 1024, PauseUS: 200})}
	final := d.Stream(ctx, streamCapability, msg, func(*nats.Msg) {
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
		}
	})
	othersOK = <-otherDone
	close(stop)
	wg.Wait()
	code = final.Header.Get(streams.HeaderError)
	if code == "" {
		code = "FINISHED"
	}
	if peak > base {
		peakKiB = float64(peak-base) / 1024
	}
	return peakKiB, code, othersOK, nil
}
