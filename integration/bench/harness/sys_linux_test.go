//go:build linux

package harness

import (
	"os"
	"testing"
	"time"
)

// TestProcFiguresReadThisProcess checks the /proc readers against what
// the process knows of itself: procCPU parses the right fields of
// /proc/<pid>/stat (it grows with work done and stays within getrusage's
// figure, both in clock ticks), and procRSS matches /proc/self's.
func TestProcFiguresReadThisProcess(t *testing.T) {
	pid := os.Getpid()
	before := ProcCPU(pid)
	// CPU work until the figure moves (a clock tick on a loaded machine
	// can take a while to earn), bounded.
	start, x := time.Now(), 0
	after := before
	for after <= before && time.Since(start) < time.Minute {
		for range 1 << 20 {
			x++
		}
		after = ProcCPU(pid)
	}
	self := ProcessCPU()
	if after <= before {
		t.Fatalf("procCPU stayed at %v over %v of work (%d loops)", before, time.Since(start), x)
	}
	if after > self+10*time.Millisecond {
		t.Fatalf("procCPU %v exceeds getrusage's %v", after, self)
	}
	if rss, own := ProcRSS(pid), ProcessRSS(); rss <= 0 || rss > 2*own || own > 2*rss {
		t.Fatalf("procRSS %d, /proc/self %d", rss, own)
	}
	if ProcCPU(-1) != 0 || ProcRSS(-1) != 0 {
		t.Fatal("a process that does not exist must read as 0")
	}
}
