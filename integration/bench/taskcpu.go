package bench

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

// taskCPUs holds a taskCPU per method.
type taskCPUs map[string]*taskCPU

// add adds one profiled point of method name.
func (t taskCPUs) add(name string, byComp map[string]time.Duration, answered int64) {
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

// perTask returns the microseconds of CPU per answered request of
// component c, background GC shared out (see ownCPU).
func (tc *taskCPU) perTask(c string) float64 {
	return ratio(usf(ownCPU(tc.byComp, c)), float64(tc.answered))
}

// total returns the microseconds of CPU per answered request of every
// component together.
func (tc *taskCPU) total() float64 {
	var d time.Duration
	for _, v := range tc.byComp {
		d += v
	}
	return ratio(usf(d), float64(tc.answered))
}

// cpuPerTask records the CPU per answered request of each method's
// profiled 64-caller rounds, by component, and returns its table rows
// (none when no profile could be taken).
func cpuPerTask(r *run, methods []string, cpu taskCPUs) [][]string {
	direct := cpu["direct"]
	if direct == nil {
		return nil
	}
	comps := []struct{ key, comp string }{{"server", compServer}, {"dispatcher", compDispatch}, {"agents", compAgents},
		{"callers", compUnlabeled}}
	var rows [][]string
	for _, name := range methods {
		tc := cpu[name]
		if tc == nil {
			continue
		}
		row := []string{name}
		for _, c := range comps {
			v := tc.perTask(c.comp)
			r.set(fmt.Sprintf("%s_%s_us_per_req_c%d", name, c.key, overheadCallers), v)
			row = append(row, f(v))
		}
		total := tc.total()
		r.set(fmt.Sprintf("%s_cpu_us_per_req_c%d", name, overheadCallers), total)
		rows = append(rows, append(row, f(total), fmt.Sprintf("%.2f", ratio(total, direct.total()))))
	}
	return rows
}
