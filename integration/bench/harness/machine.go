package harness

import (
	"runtime"
	"slices"
	"time"
)

// steadiness is how evenly the machine gave one spinning thread the CPU,
// millisecond by millisecond. On a shared or throttled virtual machine a
// vCPU runs at a fraction of its speed for stretches of milliseconds that
// nothing in the guest causes and the guest's steal time need not show.
// Such a stretch lands in whichever method is being measured, stalls every
// goroutine of this process alike, and sets how far the ratios move from
// run to run.
type steadiness struct {
	slowShare float64       // share of milliseconds in which the thread did less than a fifth of the median's work
	stretches float64       // stretches of at least steadyStretch such milliseconds, per 10 s
	longest   time.Duration // the longest stretch
}

const (
	steadySlow    = 5 // a millisecond is slow below 1/steadySlow of the median's work
	steadyStretch = 5 // consecutive slow milliseconds that count as a stretch
)

// measureSteadiness spins one thread, locked to its OS thread, for dur.
func measureSteadiness(dur time.Duration) steadiness {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	work := make([]int, dur/time.Millisecond)
	x := uint64(1)
	start := time.Now()
	for {
		for range 200 {
			x = x*6364136223846793005 + 1442695040888963407 // any work the compiler keeps
		}
		i := int(time.Since(start) / time.Millisecond)
		if i >= len(work) {
			break
		}
		work[i]++
	}
	if x == 0 { // never: keeps x, and so the loop, alive
		work[0]++
	}
	return steadinessOf(work)
}

// steadinessOf judges the work done in each millisecond against the median
// millisecond.
func steadinessOf(work []int) steadiness {
	if len(work) == 0 {
		return steadiness{}
	}
	sorted := slices.Clone(work)
	slices.Sort(sorted)
	limit := sorted[len(sorted)/2] / steadySlow
	var s steadiness
	slow, run := 0, 0
	end := func() {
		if run >= steadyStretch {
			s.stretches++
		}
		s.longest = max(s.longest, time.Duration(run)*time.Millisecond)
		run = 0
	}
	for _, w := range work {
		if w < limit {
			slow++
			run++
			continue
		}
		end()
	}
	end()
	s.slowShare = float64(slow) / float64(len(work))
	s.stretches *= float64(10*time.Second) / float64(time.Duration(len(work))*time.Millisecond)
	return s
}
