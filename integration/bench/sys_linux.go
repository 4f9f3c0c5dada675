//go:build linux

package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processRSS returns the resident set size of this process in bytes, 0 when
// unknown.
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(fields[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// pacerThread prepares the calling goroutine to pace requests: it locks it
// to its OS thread (the thread ends with the goroutine) and sets that
// thread's timer slack to 1 ns, so that pacerSleep wakes within tens of
// microseconds. Go's own timers round sleeps below a millisecond up to about
// a millisecond here, which would add up to 1 ms of generator lag to every
// open-loop latency.
func pacerThread() {
	runtime.LockOSThread()
	const prSetTimerSlack = 29
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
}

// pacerSleep sleeps d on the current thread.
func pacerSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// systemCPU returns the CPU time all processes have used (user, nice,
// system, irq, softirq from /proc/stat), 0 when unknown.
func systemCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0
	}
	var jiffies int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		v, _ := strconv.ParseInt(fields[i], 10, 64)
		jiffies += v
	}
	const userHZ = 100 // the kernel's fixed USER_HZ for /proc/stat
	return time.Duration(jiffies) * time.Second / userHZ
}
