package harness

import (
	"context"
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

// MillisOfMicros converts a histogram value in microseconds to milliseconds.
func MillisOfMicros(v int64) float64 { return float64(v) / 1000 }

// Micros is d in microseconds.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// MicrosCell formats d in microseconds for a table.
func MicrosCell(d time.Duration) string { return Cell(Micros(d)) }

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

// Execute runs fn as scenario: it measures the machine's steadiness first,
// then fn, and adds the figures every scenario reports (elapsed time, the
// other processes' CPU, quick mode).
func Execute(ctx context.Context, scenario string, o Options, fn func(*Run) error) (*Report, error) {
	r := &Run{
		Ctx:  ctx,
		opts: o,
		Rep:  &Report{Scenario: scenario, Figures: make(map[string]float64)},
		Prog: newProgress(o.Progress, scenario),
	}
	defer r.Prog.Close()
	// This process's CPU counts its ended child processes' (a scenario's
	// own nats-server process): they are part of the benchmark.
	ownCPU := func() time.Duration { return ProcessCPU() + childrenCPU() }
	start, cpu0, sys0 := time.Now(), ownCPU(), systemCPU()
	// How steadily the machine runs a thread, measured first: its slow
	// stretches hit every method of the scenario alike.
	spin := Pick(r, 2*time.Second, 500*time.Millisecond)
	r.Prog.Begin("machine steadiness", nil)
	st := measureSteadiness(spin)
	r.Set("machine_slow_ms_share", st.slowShare)
	r.Set("machine_slow_stretches_per_10s", st.stretches)
	r.Set("machine_longest_slow_ms", float64(st.longest.Milliseconds()))
	r.Note("Machine steadiness, before the scenario: one thread spinning alone for %v ran below a fifth of its median "+
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
	r.Set("elapsed_s", elapsed.Seconds())
	// Other processes on the machine take cores from the benchmark; say how
	// much, so a reader can tell a quiet run from a disturbed one.
	if sys1 := systemCPU(); sys1 > 0 {
		others := max((sys1-sys0)-(ownCPU()-cpu0), 0)
		r.Set("other_processes_cpu_cores", others.Seconds()/elapsed.Seconds())
		if c := others.Seconds() / elapsed.Seconds(); c > 0.1 {
			r.Note("Other processes used %.2f of the machine's %d cores on average during this run: "+
				"the figures are disturbed, ratios less so than absolute values.", c, runtime.NumCPU())
		}
	}
	r.Set("quick", B2F(o.Quick))
	r.Rep.Table = r.table.String()
	return r.Rep, nil
}

// Run is the state of one scenario run.
type Run struct {
	Ctx   context.Context
	opts  Options
	Rep   *Report
	Prog  *progress
	table strings.Builder
}

func (r *Run) quick() bool { return r.opts.Quick }

// Pick returns full, or quick in quick mode.
func Pick[T any](r *Run, full, quick T) T {
	if r.opts.Quick {
		return quick
	}
	return full
}

func (r *Run) Logf(format string, args ...any) {
	if r.opts.Logf != nil {
		r.opts.Logf(format, args...)
	}
}

// Set records a figure; a non-finite value (a ratio over zero) is stored
// as 0 with a note, since JSON cannot carry it.
func (r *Run) Set(key string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		r.Note("%s was not finite (%v) and is reported as 0", key, v)
		v = 0
	}
	r.Rep.Figures[key] = v
}

func (r *Run) Note(format string, args ...any) {
	r.Rep.Notes = append(r.Rep.Notes, fmt.Sprintf(format, args...))
}

// AddTable appends an aligned table with a title to the report.
func (r *Run) AddTable(title string, header []string, rows [][]string) {
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

// Goal records whether a goal of issue 3 is met, as a 0/1 figure and a note.
func (r *Run) Goal(key, text string, met bool) {
	r.Set("goal_"+key, B2F(met))
	verdict := "NOT MET"
	if met {
		verdict = "met"
	}
	r.Note("goal %s: %s", verdict, text)
}

// Sleep waits for d or until the run's context ends.
func (r *Run) Sleep(d time.Duration) error { return SleepCtx(r.Ctx, d) }

// SleepCtx waits for d, or until ctx ends and then returns its error.
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Poll calls cond every 5 ms until it is true, the timeout passes (false)
// or the run's context ends.
func (r *Run) Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || r.Ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// B2F is a yes/no figure: 1 for true, 0 for false.
func B2F(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Ratio is a/b, or 0 when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Cell formats a figure for a table.
func Cell(v float64) string {
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

// NumCPU is the number of cores the run may use.
func NumCPU() int { return runtime.GOMAXPROCS(0) }
