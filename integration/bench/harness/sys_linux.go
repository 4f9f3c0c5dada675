//go:build linux

package harness

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time (user + system) this process has used.
func ProcessCPU() time.Duration { return rusageCPU(syscall.RUSAGE_SELF) }

// childrenCPU returns the CPU time (user + system) this process's ended
// and waited-for children have used.
func childrenCPU() time.Duration { return rusageCPU(syscall.RUSAGE_CHILDREN) }

func rusageCPU(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcCPU returns the CPU time (user + system) process pid has used, 0 when
// unknown.
func ProcCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	_, rest, ok := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64) // fields 14 and 15 of the file
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / userHZ
}

// userHZ is the kernel's fixed USER_HZ, the unit of /proc's CPU times.
const userHZ = 100

// ProcessRSS returns the resident set size of this process in bytes, 0 when
// unknown.
func ProcessRSS() int64 { return statmRSS("/proc/self/statm") }

// ProcRSS returns the resident set size of process pid in bytes, 0 when
// unknown.
func ProcRSS(pid int) int64 { return statmRSS("/proc/" + strconv.Itoa(pid) + "/statm") }

func statmRSS(path string) int64 {
	b, err := os.ReadFile(path)
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
	return time.Duration(jiffies) * time.Second / userHZ
}
