package harness

import (
	"fmt"
	"time"
)

// taskCPU sums CPU by component over profiled points and the requests
// they answered.
type taskCPU struct {
	byComp   map[string]time.Duration
	answered int64
}

// TaskCPUs holds a taskCPU per method.
type TaskCPUs map[string]*taskCPU

// Add adds one profiled point of method name.
func (t TaskCPUs) Add(name string, byComp map[string]time.Duration, answered int64) {
	tc := t[name]
	if tc == nil {
		tc = &taskCPU{byComp: map[string]time.Duration{}}
		t[name] = tc
	}
	for k, v := range byComp {
		tc.byComp[k] += v
	}
	tc.answered += answered
}

// PerTask returns the microseconds of CPU per answered request of
// component c, background GC shared out (see ownCPU).
func (tc *taskCPU) PerTask(c string) float64 {
	return Ratio(Micros(OwnCPU(tc.byComp, c)), float64(tc.answered))
}

// Total returns the microseconds of CPU per answered request of every
// component together.
func (tc *taskCPU) Total() float64 {
	var d time.Duration
	for _, v := range tc.byComp {
		d += v
	}
	return Ratio(Micros(d), float64(tc.answered))
}

// CPUPerTask records the CPU per answered request of each method's
// profiled 64-caller rounds, by component, and returns its table rows
// (none when no profile could be taken).
func CPUPerTask(r *Run, methods []string, cpu TaskCPUs) [][]string {
	direct := cpu["direct"]
	if direct == nil {
		return nil
	}
	comps := []struct{ key, comp string }{{"server", CompServer}, {"dispatcher", CompDispatch}, {"agents", CompAgents},
		{"callers", CompUnlabeled}}
	var rows [][]string
	for _, name := range methods {
		tc := cpu[name]
		if tc == nil {
			continue
		}
		row := []string{name}
		for _, c := range comps {
			v := tc.PerTask(c.comp)
			r.Set(fmt.Sprintf("%s_%s_us_per_req_c%d", name, c.key, OverheadCallers), v)
			row = append(row, Cell(v))
		}
		total := tc.Total()
		r.Set(fmt.Sprintf("%s_cpu_us_per_req_c%d", name, OverheadCallers), total)
		rows = append(rows, append(row, Cell(total), fmt.Sprintf("%.2f", Ratio(total, direct.Total()))))
	}
	return rows
}
