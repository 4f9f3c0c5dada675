package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/streams"
)

// procKB reads a "VmRSS"/"VmHWM" style field (kB) of a process.
func procKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

// At its in-flight cap a dispatcher answers OVERLOADED at once, and its
// memory stays bounded under 10× overload for 30 s. The dispatcher runs as
// a child process so its own RSS is what is measured.
func TestOverloadIsRefusedAndMemoryStaysBounded(t *testing.T) {
	const (
		maxInFlight = 50
		service     = 200 * time.Millisecond
		capacity    = maxInFlight * int(time.Second/service) // 250 tasks/s
		offered     = 10 * capacity
		duration    = 30 * time.Second
	)
	st := NewStack(t, time.Second)
	cfg := &config.Config{MaxInFlight: maxInFlight}
	child := StartChild(t, ChildDispatcher, st.Server.ClientURL(), "", 0, cfg)
	st.Agent(agentkit.Config{Type: "slow", ID: "slow-1", MaxConcurrent: 2 * maxInFlight}, map[string]agentkit.Handler{"slow": Slow(service)})
	c := st.Client()
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := c.Call(context.Background(), "slow", map[string]any{}, agentkit.WithTimeout(time.Second))
		return err
	})

	nc := st.Conn()
	// timedOut counts admitted tasks that did not finish within their
	// per-call timeout: a starved machine (a busy CI host) can make the
	// 200 ms tasks that slow; it is no refusal and no unbounded growth.
	var finished, overloaded, timedOut, other atomic.Int64
	var othersMu sync.Mutex
	others := map[string]int{} // what the other answers were: status and error code
	inbox := nc.NewRespInbox()
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		switch {
		case m.Header.Get(streams.HeaderStatus) == string(streams.StatusFinished):
			finished.Add(1)
		case m.Header.Get(streams.HeaderError) == string(streams.CodeOverloaded) && m.Header.Get(streams.HeaderAttempt) == "0" &&
			m.Header.Get(streams.HeaderRequestID) != "" && m.Header.Get(streams.HeaderOrchestrationID) != "":
			// Like every reply, it says which task it answers.
			overloaded.Add(1)
		case m.Header.Get(streams.HeaderError) == string(streams.CodeTimeout):
			timedOut.Add(1)
		default:
			other.Add(1)
			othersMu.Lock()
			others[m.Header.Get(streams.HeaderStatus)+" "+m.Header.Get(streams.HeaderError)]++
			othersMu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)

	pid := child.Process.Pid
	var sent int64
	var rssAt10s, peakSampled int64
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	msg := nats.NewMsg("reach.task.slow")
	msg.Reply, msg.Data = inbox, []byte(`{}`)
	for now := range tick.C {
		elapsed := now.Sub(start)
		if elapsed >= duration {
			break
		}
		for due := int64(elapsed.Seconds() * float64(offered)); sent < due; sent++ {
			if err := nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
		}
		if rss := procKB(pid, "VmRSS"); rss > peakSampled {
			peakSampled = rss
		}
		if rssAt10s == 0 && elapsed >= 10*time.Second {
			rssAt10s = procKB(pid, "VmRSS")
		}
	}
	// Every request gets an answer once the tasks held finish.
	natstest.WaitFor(t, 30*time.Second, func() error {
		if got := finished.Load() + overloaded.Load() + timedOut.Load() + other.Load(); got < sent {
			return fmt.Errorf("%d of %d answered", got, sent)
		}
		return nil
	})
	rssEnd, hwm := procKB(pid, "VmRSS"), procKB(pid, "VmHWM")
	t.Logf("offered %d tasks at %d/s for %v: %d finished, %d OVERLOADED, %d TIMEOUT, %d other", sent, offered, duration,
		finished.Load(), overloaded.Load(), timedOut.Load(), other.Load())
	t.Logf("dispatcher RSS: %d kB at 10 s, %d kB at the end, peak %d kB (VmHWM)", rssAt10s, rssEnd, hwm)
	if other.Load() != 0 {
		othersMu.Lock()
		defer othersMu.Unlock()
		t.Fatalf("%d answers were neither results, OVERLOADED nor TIMEOUT: %v (status and error code: count)", other.Load(), others)
	}
	if overloaded.Load() < sent/2 {
		t.Fatalf("only %d of %d refused at 10× the capacity", overloaded.Load(), sent)
	}
	if finished.Load() == 0 {
		t.Fatal("nothing was served")
	}
	// Bounded: no growth after the first 10 s beyond noise.
	if rssEnd > rssAt10s+rssAt10s/2+16<<10 {
		t.Fatalf("RSS grew from %d kB at 10 s to %d kB: not bounded", rssAt10s, rssEnd)
	}
}
