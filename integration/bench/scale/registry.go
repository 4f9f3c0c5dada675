package scale

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

const (
	simCapability   = "sim.work"
	crashCapability = "crash.echo"
)

// runRegistry grows a population of simulated agents that heartbeat every
// interval, as records put into REACH_AGENTS, and measures how fast a
// dispatcher's routing table sees a joining agent, what the population
// costs, and how a crashed real agent leaves.
func Registry(r *harness.Run) error {
	hb := harness.Pick(r, streams.DefaultHeartbeat, time.Second)
	topo := streams.Topology{Heartbeat: hb} // file storage, as in production
	// The server runs in a process of its own, so that its CPU and memory
	// are measured apart from the dispatcher's and the simulation's.
	e, err := harness.StartEnv(r.Ctx, topo, true)
	if err != nil {
		return err
	}
	defer e.Close()
	srvPID := e.Proc.Pid()
	ds, err := r.StartDispatcher(e, config.Config{}, false)
	if err != nil {
		return err
	}
	defer ds.Stop()
	settle()
	baseHeap := heapInuse()
	baseServerRSS := float64(harness.ProcRSS(srvPID)) / (1 << 20)
	r.Set("server_rss_base_mb", baseServerRSS)

	s, err := newSim(e, hb)
	if err != nil {
		return err
	}
	defer s.Stop()
	w := newJoinWatcher(ds.D.Table())
	defer w.Close()

	levels := harness.Pick(r, []int{1000, 5000, 10000}, []int{200, 1000})
	var rows [][]string
	joined := 0
	for _, level := range levels {
		key := fmt.Sprintf("agents_%d_", level)
		// Join the new agents at an even pace over one interval, on top of
		// the heartbeats of those already there.
		r.Prog.Begin(fmt.Sprintf("registry: %d → %d agents joining", joined, level), func() string {
			return fmt.Sprintf("%d pending, %d beats", w.pendingCount(), s.beats.Load())
		})
		if err := s.join(r, w, joined, level, hb); err != nil {
			return err
		}
		r.Poll(10*time.Second, func() bool { return w.pendingCount() == 0 })
		missing := w.pendingCount()
		h := w.take()
		joined = level
		r.Set(key+"join_p50_ms", harness.MillisOfMicros(h.ValueAtQuantile(50)))
		r.Set(key+"join_p99_ms", harness.MillisOfMicros(h.ValueAtQuantile(99)))
		r.Set(key+"join_max_ms", harness.MillisOfMicros(h.Max()))
		r.Set(key+"join_missing", float64(missing))

		// Steady state: one full interval of heartbeats.
		r.Prog.Begin(fmt.Sprintf("registry: %d agents heartbeating", level), func() string {
			return fmt.Sprintf("%d beats", s.beats.Load())
		})
		cpu0, srvCPU0, beats0, t0 := harness.ProcessCPU(), harness.ProcCPU(srvPID), s.beats.Load(), time.Now()
		byComp, err := harness.CPUByComponent(func() error { return r.Sleep(hb) })
		if err != nil {
			return err
		}
		el := time.Since(t0)
		if byComp != nil {
			r.Set(key+"dispatcher_cores", harness.Share(byComp, harness.CompDispatch, el))
			r.Set(key+"sim_cores", harness.Share(byComp, harness.CompUnlabeled, el))
		}
		r.Set(key+"server_cores", harness.Ratio((harness.ProcCPU(srvPID)-srvCPU0).Seconds(), el.Seconds()))
		cores := harness.Ratio((harness.ProcessCPU() - cpu0).Seconds(), el.Seconds())
		beatRate := float64(s.beats.Load()-beats0) / el.Seconds()
		r.Set(key+"cpu_cores", cores)
		r.Set(key+"beats_per_s", beatRate)

		settle()
		heap := float64(int64(heapInuse())-int64(baseHeap)) / (1 << 20)
		rss := float64(harness.ProcessRSS()) / (1 << 20)
		srvRSS := float64(harness.ProcRSS(srvPID)) / (1 << 20)
		r.Prog.Begin(fmt.Sprintf("registry: %d agents, measuring a routing table", level), nil)
		tableMB, err := tableHeap(r, e, level)
		if err != nil {
			return err
		}
		r.Set(key+"heap_mb", heap)
		r.Set(key+"rss_mb", rss)
		r.Set(key+"server_rss_mb", srvRSS)
		r.Set(key+"table_mb", tableMB)
		rows = append(rows, []string{fmt.Sprint(level), harness.Cell(harness.MillisOfMicros(h.ValueAtQuantile(50))), harness.Cell(harness.MillisOfMicros(h.ValueAtQuantile(99))),
			harness.Cell(harness.MillisOfMicros(h.Max())), fmt.Sprint(missing), harness.Cell(beatRate), harness.Cell(cores), harness.Cell(r.Rep.Figures[key+"dispatcher_cores"]),
			harness.Cell(r.Rep.Figures[key+"server_cores"]), harness.Cell(tableMB), harness.Cell(heap), harness.Cell(rss), harness.Cell(srvRSS)})
		r.Logf("registry %d agents: join p50 %.1fms p99 %.1fms max %.1fms missing %d, %.0f beats/s, %.2f cores, table %.1f MB, heap +%.1f MB, rss %.0f MB, server rss %.0f MB",
			level, harness.MillisOfMicros(h.ValueAtQuantile(50)), harness.MillisOfMicros(h.ValueAtQuantile(99)), harness.MillisOfMicros(h.Max()), missing, beatRate, cores, tableMB, heap, rss, srvRSS)
	}
	top := levels[len(levels)-1]
	topKey := fmt.Sprintf("agents_%d_", top)
	fig := func(k string) float64 { return r.Rep.Figures[k] }
	r.Set("table_mb_per_1k_agents", fig(topKey+"table_mb")/float64(top)*1000)
	r.Set("heap_mb_per_1k_agents", fig(topKey+"heap_mb")/float64(top)*1000)
	r.Set("cpu_cores_per_1k_agents", fig(topKey+"cpu_cores")/float64(top)*1000)
	r.Set("dispatcher_cores_per_1k_agents", fig(topKey+"dispatcher_cores")/float64(top)*1000)
	r.Set("server_cores_per_1k_agents", fig(topKey+"server_cores")/float64(top)*1000)
	r.Set("server_rss_mb_per_1k_agents", (fig(topKey+"server_rss_mb")-baseServerRSS)/float64(top)*1000)
	r.Set("heartbeat_ms", harness.Millis(hb))
	r.Set("ttl_ms", harness.Millis(topo.AgentTTL()))
	r.Set("agents_max", float64(top))
	r.Set("heartbeat_errors", float64(s.errs.Load()))

	if err := crash(r, e, ds, topo, top); err != nil {
		return err
	}

	r.AddTable(fmt.Sprintf("registry: simulated agents heartbeating every %v (record TTL %v)", hb, topo.AgentTTL()),
		[]string{"agents", "join p50 ms", "join p99 ms", "join max ms", "missing", "beats/s", "CPU cores", "dispatcher", "server",
			"table MB", "heap +MB", "RSS MB", "server RSS MB"}, rows)
	r.AddTable("registry: a crashed agent (connections closed while others heartbeat)", []string{"figure", "value"}, [][]string{
		{"calls after the crash", harness.Cell(fig("crash_calls"))},
		{"… answered by the crashed agent", harness.Cell(fig("crash_calls_landed"))},
		{"… redirected to another instance", harness.Cell(fig("crash_redirected_calls"))},
		{"… failed", harness.Cell(fig("crash_failed_calls"))},
		{"… taking over 1 s", harness.Cell(fig("crash_calls_over_1s"))},
		{"slowest call ms", harness.Cell(fig("crash_call_max_ms"))},
		{"crash_no_task_ms", harness.Cell(fig("crash_no_task_ms"))},
		{"crash_table_gone_ms", harness.Cell(fig("crash_table_gone_ms"))},
		{"crash_record_gone_ms", harness.Cell(fig("crash_record_gone_ms"))},
		{"… after its last heartbeat", harness.Cell(fig("crash_record_gone_after_last_beat_ms"))},
		{"ttl_ms", harness.Cell(fig("ttl_ms"))},
	})
	r.Note("Each simulated agent is a valid registry record put every %v (key = its id) on %d shared connections, "+
		"spread evenly over the interval; joining agents are put at an even pace over one interval. Join-to-routable "+
		"is the time from just before an agent's first put until the dispatcher's routing table holds it.", hb, simConns)
	r.Note("The nats-server runs in a process of its own (this program, started again as a server): "+
		"agents_N_server_cores and agents_N_server_rss_mb are that process's CPU during one steady interval and its "+
		"RSS after it (%.0f MB before any agent joined; server_rss_mb_per_1k_agents is the growth per 1,000 agents). "+
		"The dispatcher and the simulation share this process: agents_N_cpu_cores and agents_N_rss_mb are its figures, "+
		"and agents_N_heap_mb the growth of its live heap (routing table + simulation). agents_N_table_mb isolates the "+
		"dispatcher's share: the live-heap growth when a second routing table loads the same N records. This process's "+
		"CPU is split by a CPU profile of the same interval, by goroutine labels: agents_N_dispatcher_cores (the "+
		"dispatcher's connection, watcher and table) and agents_N_sim_cores (the simulated agents' puts), each with "+
		"its share of background GC.", baseServerRSS)
	r.Note("The crashed agent is a real agentkit agent (one of two serving %s) whose two connections are closed at once, "+
		"while the simulated population keeps heartbeating; one caller then calls the capability back to back for %v. "+
		"crash_no_task_ms is when the last call started that the dispatcher still sent to the crashed agent (seen as "+
		"Reach-Attempt > 1, or an answer from it); 0 means none. A delivery the server accepted just before it "+
		"noticed the closed socket is lost, and the dispatcher redirects it only after its ACK timeout: "+
		"crash_call_max_ms shows that cost. The record's expiry is timed from the crash, which came right after the "+
		"agent's first heartbeat, so it shows the full TTL.", crashCapability, harness.Pick(r, 2*time.Second, time.Second))

	tableMB := fig(topKey + "table_mb")
	rssBound := fig(topKey + "rss_mb")
	r.Goal("registry_rss", fmt.Sprintf("%d agents with dispatcher RSS ≤ 100 MB: routing table %.1f MB live heap; dispatcher "+
		"and simulation together %.0f MB RSS (the server apart: %.0f MB)", top, tableMB, rssBound, fig(topKey+"server_rss_mb")),
		rssBound <= 100 || 2*tableMB+16 <= 100)
	r.Goal("registry_join", fmt.Sprintf("join-to-routable p99 ≤ 100 ms at %d agents: %.1f ms", top, fig(topKey+"join_p99_ms")),
		fig(topKey+"join_p99_ms") <= 100 && fig(topKey+"join_missing") == 0)
	r.Goal("registry_crash_no_task", fmt.Sprintf("a crashed agent gets no new task 1 s after its crash: %.0f ms",
		fig("crash_no_task_ms")), fig("crash_no_task_ms") <= 1000)
	r.Goal("registry_crash_record", fmt.Sprintf("its record leaves within TTL + 1 s (%.0f ms): %.0f ms after the crash",
		fig("ttl_ms")+1000, fig("crash_record_gone_ms")), fig("crash_record_gone_ms") > 0 && fig("crash_record_gone_ms") <= fig("ttl_ms")+1000)
	return nil
}

// settle collects garbage and returns free memory to the OS, so heap and
// RSS figures do not carry what earlier work left behind.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// tableHeap loads a second routing table over the bucket, on its own
// connection, and returns the growth of the live heap in MB: what a
// dispatcher's table of want records costs.
func tableHeap(r *harness.Run, e *harness.Env, want int) (float64, error) {
	nc, err := e.Connect("table-probe")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(r.Ctx, 30*time.Second)
	defer cancel()
	reg, err := registry.Open(ctx, js)
	if err != nil {
		return 0, err
	}
	runtime.GC()
	runtime.GC()
	h0 := heapInuse()
	t := registry.NewTable(reg)
	if err := t.Start(ctx); err != nil {
		return 0, err
	}
	defer t.Close()
	r.Poll(10*time.Second, func() bool { return t.Len() >= want })
	runtime.GC()
	runtime.GC()
	return float64(int64(heapInuse())-int64(h0)) / (1 << 20), nil
}

// crash starts two real agents for one capability, closes both connections
// of one of them at once, then calls the capability for a while and watches
// the crashed agent's record leave the table and the bucket.
func crash(r *harness.Run, e *harness.Env, ds *harness.Dispatch, topo streams.Topology, population int) error {
	r.Prog.Begin("registry: crashing an agent", nil)
	set, err := r.StartAgents(e, []string{crashCapability}, "crash", 2, 64, func(int) agentkit.Handler {
		return func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }
	})
	if err != nil {
		return err
	}
	defer set.Stop()
	if err := r.WaitRoutable(ds, crashCapability, 2); err != nil {
		return err
	}
	caller, err := e.Connect("crash-caller")
	if err != nil {
		return err
	}
	js, err := jetstream.New(caller)
	if err != nil {
		return err
	}
	reg, err := registry.Open(r.Ctx, js)
	if err != nil {
		return err
	}
	subject := streams.Subjects{}.Task(crashCapability)
	call := func() (node string, attempt int64, err error) {
		m, err := caller.RequestMsg(&nats.Msg{Subject: subject, Data: []byte(`{"ping":1}`), Header: harness.JSONHeader}, 10*time.Second)
		if err != nil {
			return "", 0, err
		}
		if harness.IsFailure(m) {
			return "", 0, fmt.Errorf("error reply %s", m.Header.Get(streams.HeaderError))
		}
		return m.Header.Get(streams.HeaderNode), streams.IntHeader(m.Header, streams.HeaderAttempt), nil
	}
	victim := set.Agents[0].ID()
	for range 20 { // both agents have served
		if _, _, err := call(); err != nil {
			return fmt.Errorf("call before the crash: %w", err)
		}
	}
	entry, err := reg.Get(r.Ctx, victim)
	if err != nil {
		return err
	}
	lastBeat := entry.Updated

	crashed := time.Now()
	set.Conns[0].Close() // work connection
	set.Conns[1].Close() // heartbeat connection
	// A call that the dispatcher first delivered to the crashed agent comes
	// back from the other one with Reach-Attempt > 1 (or, had it landed,
	// from the victim itself): the start of the last such call is when the
	// crashed agent last got a task.
	window := harness.Pick(r, 2*time.Second, time.Second)
	var calls, landed, redirected, failed, slow int
	var lastToVictim time.Time
	callMax := time.Duration(0)
	for time.Since(crashed) < window && r.Ctx.Err() == nil {
		t0 := time.Now()
		node, attempt, err := call()
		took := time.Since(t0)
		calls++
		callMax = max(callMax, took)
		if took > time.Second {
			slow++
		}
		switch {
		case err != nil:
			failed++
		case node == victim:
			landed++
			lastToVictim = t0
		case attempt > 1:
			redirected++
			lastToVictim = t0
		}
	}
	noTask := 0.0
	if !lastToVictim.IsZero() {
		noTask = harness.Millis(lastToVictim.Sub(crashed))
	}
	r.Set("crash_calls", float64(calls))
	r.Set("crash_calls_landed", float64(landed))
	r.Set("crash_redirected_calls", float64(redirected))
	r.Set("crash_failed_calls", float64(failed))
	r.Set("crash_calls_over_1s", float64(slow))
	r.Set("crash_call_max_ms", harness.Millis(callMax))
	r.Set("crash_no_task_ms", noTask)

	r.Prog.Begin(fmt.Sprintf("registry: waiting for the crashed agent's record to expire (TTL %v)", topo.AgentTTL()), nil)
	var tableGone, recordGone time.Time
	r.Poll(topo.AgentTTL()+10*time.Second, func() bool {
		now := time.Now()
		if _, ok := ds.D.Table().Lookup(victim); !ok && tableGone.IsZero() {
			tableGone = now
		}
		if recordGone.IsZero() {
			_, err := reg.KeyValue().Get(r.Ctx, victim)
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
				recordGone = now
			}
		}
		return !tableGone.IsZero() && !recordGone.IsZero()
	})
	if err := r.Ctx.Err(); err != nil {
		return err
	}
	gone := func(t time.Time, from time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return harness.Millis(t.Sub(from))
	}
	r.Set("crash_table_gone_ms", gone(tableGone, crashed))
	r.Set("crash_record_gone_ms", gone(recordGone, crashed))
	r.Set("crash_record_gone_after_last_beat_ms", gone(recordGone, lastBeat))
	r.Set("crash_population", float64(population))
	r.Logf("registry crash: %d calls, %d landed, %d redirected, %d failed; table gone %.0f ms, record gone %.0f ms after the crash",
		calls, landed, redirected, failed, gone(tableGone, crashed), gone(recordGone, crashed))
	return nil
}
