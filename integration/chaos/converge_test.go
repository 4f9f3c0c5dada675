//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// convergeTarget is DESIGN.md §7's bound: within 5 s of a fault healing,
// every dispatcher's table and the REACH_AGENTS listing equal the live
// agents and calls succeed. A scenario that converges later fails.
const convergeTarget = 5 * time.Second

// convergeBound is how long the suite keeps measuring past the target, so
// that a scenario that misses it still reports by how much.
const convergeBound = 30 * time.Second

// probeTimeout bounds one probe: a request lost in a partition is asked
// again after it, not after a client's default timeout, so the measure is
// not coarser than this.
const probeTimeout = time.Second

// convergence is how long after a heal each part of the stack agreed again:
// the three probes run side by side, each repeated until it passes, so a
// probe that waits on a lost request does not delay the others' figures.
type convergence struct {
	total                  time.Duration // the listing, the tables and a call at once
	listing, tables, calls time.Duration // each on its own (end of its first pass)
	// The last failure of each probe and when, after the heal: where the
	// time went.
	last map[string]string
}

func (c convergence) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v (listing %v, tables %v, call %v)", c.total.Round(time.Millisecond),
		c.listing.Round(time.Millisecond), c.tables.Round(time.Millisecond), c.calls.Round(time.Millisecond))
	return b.String()
}

type probe struct {
	name string
	fn   func(context.Context) error
}

// converge measures, within bound, how long until the listing, every
// dispatcher's table and a call agree at once.
func (s *stack) converge(bound time.Duration) (convergence, error) {
	probes := []probe{{"listing", s.listingProbe}, {"tables", s.tablesProbe}, {"call", s.callProbe}}
	start := time.Now()
	deadline := start.Add(bound)
	c := convergence{last: map[string]string{}}
	var mu sync.Mutex
	passed := make([]time.Duration, len(probes))
	// untilPass repeats p until it passes or the bound runs out; it
	// returns when it passed, measured from start.
	untilPass := func(p probe) (time.Duration, error) {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			err := p.fn(ctx)
			cancel()
			now := time.Now()
			s.noteProbe(p.name, err)
			if err == nil {
				return now.Sub(start), nil
			}
			mu.Lock()
			c.last[p.name] = fmt.Sprintf("until %v: %v", now.Sub(start).Round(time.Millisecond), err)
			mu.Unlock()
			if now.After(deadline) {
				return 0, fmt.Errorf("%s: %w", p.name, err)
			}
			// The pace of the probes, not a synchronisation.
			time.Sleep(20 * time.Millisecond)
		}
	}
	for {
		var wg sync.WaitGroup
		errs := make([]error, len(probes))
		for i := range probes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				passed[i], errs[i] = untilPass(probes[i])
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				c.total = time.Since(start)
				return c, err
			}
		}
		if c.listing == 0 {
			c.listing, c.tables, c.calls = passed[0], passed[1], passed[2]
		}
		// All three at once: one more round, side by side, that must pass
		// at its first try; otherwise the state moved on and the probes
		// start again.
		ok := true
		for _, p := range probes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
				defer cancel()
				err := p.fn(ctx)
				s.noteProbe(p.name, err)
				if err != nil {
					mu.Lock()
					ok = false
					c.last[p.name] = fmt.Sprintf("confirming at %v: %v", time.Since(start).Round(time.Millisecond), err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if ok {
			c.total = max(passed[0], passed[1], passed[2])
			return c, nil
		}
		if time.Now().After(deadline) {
			c.total = time.Since(start)
			return c, fmt.Errorf("not stable: %v", c.last)
		}
	}
}
