//go:build !linux

package harness

import (
	"runtime"
	"time"
)

// ProcessCPU is unknown off Linux: 0.
func ProcessCPU() time.Duration { return 0 }

// childrenCPU is unknown off Linux: 0.
func childrenCPU() time.Duration { return 0 }

// ProcCPU is unknown off Linux: 0.
func ProcCPU(int) time.Duration { return 0 }

// ProcRSS is unknown off Linux: 0.
func ProcRSS(int) int64 { return 0 }

// ProcessRSS approximates the resident set by the memory the Go runtime
// holds from the OS.
func ProcessRSS() int64 {
	var Millis runtime.MemStats
	runtime.ReadMemStats(&Millis)
	return int64(Millis.Sys)
}

// pacerThread locks the pacing goroutine to its thread.
func pacerThread() { runtime.LockOSThread() }

// pacerSleep sleeps d with Go's timers.
func pacerSleep(d time.Duration) { time.Sleep(d) }

// systemCPU is unknown off Linux: 0.
func systemCPU() time.Duration { return 0 }
