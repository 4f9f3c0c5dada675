//go:build !linux

package bench

import (
	"runtime"
	"time"
)

// processCPU is unknown off Linux: 0.
func processCPU() time.Duration { return 0 }

// childrenCPU is unknown off Linux: 0.
func childrenCPU() time.Duration { return 0 }

// procCPU is unknown off Linux: 0.
func procCPU(int) time.Duration { return 0 }

// procRSS is unknown off Linux: 0.
func procRSS(int) int64 { return 0 }

// processRSS approximates the resident set by the memory the Go runtime
// holds from the OS.
func processRSS() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.Sys)
}

// pacerThread locks the pacing goroutine to its thread.
func pacerThread() { runtime.LockOSThread() }

// pacerSleep sleeps d with Go's timers.
func pacerSleep(d time.Duration) { time.Sleep(d) }

// systemCPU is unknown off Linux: 0.
func systemCPU() time.Duration { return 0 }
