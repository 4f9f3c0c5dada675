package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Scenario names, as Run and `agentreach bench <scenario>` take them.
const (
	ScenarioOverhead = "overhead"
	ScenarioSkew     = "skew"
	ScenarioDurable  = "durable"
	ScenarioRegistry = "registry"
	// ScenarioWorkflow is a 3-step workflow against one routed call.
	ScenarioWorkflow = "workflow"
	// ScenarioMatch is requirement matching at 10,000 agents (issue 16).
	ScenarioMatch = "match"
	// ScenarioHedge is hedged requests against a 2% stall tail (issue 17).
	ScenarioHedge = "hedge"
	// ScenarioFanOut is a 10-branch fan-out against one routed call (issue 17).
	ScenarioFanOut = "fanout"
	// ScenarioBroadcast is a broadcast to 1,000 instances against a raw
	// NATS scatter-gather (issue 17).
	ScenarioBroadcast = "broadcast"
	// ScenarioSecurity is routed throughput with auth, the ACL and TLS on
	// against off (issue 19).
	ScenarioSecurity = "security"
)

// ErrUnknownScenario is returned by Run for a name Scenarios does not list.
var ErrUnknownScenario = errors.New("bench: unknown scenario")

// Options configures a run. The zero value runs the full-length scenario
// without progress display or log lines.
type Options struct {
	// Quick shortens every measurement point (to about half a second) and
	// trims the load steps, so that all scenarios together take about a
	// minute and a half. Its figures are noisy: use it to check that the suite works,
	// not to quote numbers.
	Quick bool
	// Progress receives a live status line, redrawn in place with a carriage
	// return and an erase-line sequence, so pass a terminal; nil means none.
	Progress io.Writer
	// Logf receives one line per finished measurement point; nil means none.
	Logf func(format string, args ...any)
}

// Report is the outcome of one scenario.
type Report struct {
	// Scenario is the scenario's name.
	Scenario string
	// Figures holds every measured figure under its JSON key. Values are
	// always finite.
	Figures map[string]float64
	// Table is a readable summary: one or more aligned tables.
	Table string
	// Notes say how to read the figures: what is included, what is
	// approximated, which goals are met.
	Notes []string
}

// Scenarios lists the scenario names in the order `make bench` runs them.
func Scenarios() []string {
	return []string{ScenarioOverhead, ScenarioSkew, ScenarioDurable, ScenarioRegistry, ScenarioWorkflow,
		ScenarioMatch, ScenarioHedge, ScenarioFanOut, ScenarioBroadcast, ScenarioSecurity, ScenarioHTTP, ScenarioConnect}
}

// Run runs one scenario in this process against a nats-server on loopback
// (embedded, or for registry a process of its own: see ServeChild) and
// returns its report. It stops promptly, with ctx's error,
// when ctx ends. Runs are not meant to overlap: each one loads the machine.
func Run(ctx context.Context, scenario string, o Options) (*Report, error) {
	var fn func(*run) error
	switch scenario {
	case ScenarioOverhead:
		fn = runOverhead
	case ScenarioSkew:
		fn = runSkew
	case ScenarioDurable:
		fn = runDurable
	case ScenarioRegistry:
		fn = runRegistry
	case ScenarioWorkflow:
		fn = runWorkflow
	case ScenarioMatch:
		fn = runMatch
	case ScenarioHedge:
		fn = runHedge
	case ScenarioFanOut:
		fn = runFanOut
	case ScenarioBroadcast:
		fn = runBroadcast
	case ScenarioSecurity:
		fn = runSecurity
	case ScenarioHTTP:
		fn = runHTTP
	case ScenarioConnect:
		fn = runConnect
	default:
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownScenario, scenario, strings.Join(Scenarios(), ", "))
	}
	r := &run{
		ctx:  ctx,
		opts: o,
		rep:  &Report{Scenario: scenario, Figures: make(map[string]float64)},
		prog: newProgress(o.Progress, scenario),
	}
	defer r.prog.close()
	// This process's CPU counts its ended child processes' (a scenario's
	// own nats-server process): they are part of the benchmark.
	ownCPU := func() time.Duration { return processCPU() + childrenCPU() }
	start, cpu0, sys0 := time.Now(), ownCPU(), systemCPU()
	// How steadily the machine runs a thread, measured first: its slow
	// stretches hit every method of the scenario alike.
	spin := pick(r, 2*time.Second, 500*time.Millisecond)
	r.prog.begin("machine steadiness", nil)
	st := measureSteadiness(spin)
	r.set("machine_slow_ms_share", st.slowShare)
	r.set("machine_slow_stretches_per_10s", st.stretches)
	r.set("machine_longest_slow_ms", float64(st.longest.Milliseconds()))
	r.note("Machine steadiness, before the scenario: one thread spinning alone for %v ran below a fifth of its median "+
		"speed in %.1f%% of its milliseconds, in %.0f stretches of %d ms or more per 10 s, the longest %d ms. Whatever runs "+
		"during such a stretch (on a shared or throttled VM the host's doing, not this process's) waits too.",
		spin, 100*st.slowShare, st.stretches, steadyStretch, st.longest.Milliseconds())
	err := fn(r)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", scenario, err)
	}
	elapsed := time.Since(start)
	r.set("elapsed_s", elapsed.Seconds())
	// Other processes on the machine take cores from the benchmark; say how
	// much, so a reader can tell a quiet run from a disturbed one.
	if sys1 := systemCPU(); sys1 > 0 {
		others := max((sys1-sys0)-(ownCPU()-cpu0), 0)
		r.set("other_processes_cpu_cores", others.Seconds()/elapsed.Seconds())
		if c := others.Seconds() / elapsed.Seconds(); c > 0.1 {
			r.note("Other processes used %.2f of the machine's %d cores on average during this run: "+
				"the figures are disturbed, ratios less so than absolute values.", c, runtime.NumCPU())
		}
	}
	r.set("quick", b2f(o.Quick))
	r.rep.Table = r.table.String()
	return r.rep, nil
}

// run is the state of one scenario run.
type run struct {
	ctx   context.Context
	opts  Options
	rep   *Report
	prog  *progress
	table strings.Builder
}

func (r *run) quick() bool { return r.opts.Quick }

// pick returns full, or quick in quick mode.
func pick[T any](r *run, full, quick T) T {
	if r.opts.Quick {
		return quick
	}
	return full
}

func (r *run) logf(format string, args ...any) {
	if r.opts.Logf != nil {
		r.opts.Logf(format, args...)
	}
}

// set records a figure; a non-finite value (a ratio over zero) is stored
// as 0 with a note, since JSON cannot carry it.
func (r *run) set(key string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		r.note("%s was not finite (%v) and is reported as 0", key, v)
		v = 0
	}
	r.rep.Figures[key] = v
}

func (r *run) note(format string, args ...any) {
	r.rep.Notes = append(r.rep.Notes, fmt.Sprintf(format, args...))
}

// addTable appends an aligned table with a title to the report.
func (r *run) addTable(title string, header []string, rows [][]string) {
	if r.table.Len() > 0 {
		r.table.WriteString("\n")
	}
	r.table.WriteString(title + "\n")
	tw := tabwriter.NewWriter(&r.table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	_ = tw.Flush()
}

// goal records whether a goal of issue 3 is met, as a 0/1 figure and a note.
func (r *run) goal(key, text string, met bool) {
	r.set("goal_"+key, b2f(met))
	verdict := "NOT MET"
	if met {
		verdict = "met"
	}
	r.note("goal %s: %s", verdict, text)
}

// sleep waits for d or until the run's context ends.
func (r *run) sleep(d time.Duration) error { return sleepCtx(r.ctx, d) }

// sleepCtx waits for d, or until ctx ends and then returns its error.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll calls cond every 5 ms until it is true, the timeout passes (false)
// or the run's context ends.
func (r *run) poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// f formats a figure for a table.
func f(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// SortedKeys returns the report's figure keys in order, for printing.
func (rep *Report) SortedKeys() []string {
	keys := make([]string, 0, len(rep.Figures))
	for k := range rep.Figures {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Clip(keys)
}

// numCPU is the number of cores the run may use.
func numCPU() int { return runtime.GOMAXPROCS(0) }
