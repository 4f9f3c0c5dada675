package engine

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/dispatcher/selection"
	"github.com/agent-reach/agentreach/streams"
)

// fairReplica is an Engine with only what admit and free use.
func fairReplica(t testing.TB, maxInFlight, fairShareAt int) *Engine {
	t.Helper()
	cfg := config.Config{Name: "r", MaxInFlight: maxInFlight, FairShareAt: fairShareAt}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &Engine{cfg: cfg, fair: selection.NewFairShare(cfg.FairShareAt)}
}

// Each case admits its tasks in order, then releases those listed; what it
// checks is which admissions were refused and the counts left.
func TestFairShareAdmission(t *testing.T) {
	type take struct {
		caller string
		n      int
	}
	cases := []struct {
		name        string
		max, at     int
		takes       []take
		refused     map[string]int // caller → how many of its takes got OVERLOADED
		release     []string
		then        []take // admitted after release
		thenRefused map[string]int
	}{
		{name: "a caller alone fills the replica up to the mark", max: 10, at: 8,
			takes: []take{{"a", 12}}, refused: map[string]int{"a": 4}},
		{name: "the default mark is 80%", max: 10,
			takes: []take{{"a", 10}}, refused: map[string]int{"a": 2}},
		{name: "mark at the cap: a caller alone takes it all", max: 10, at: 10,
			takes: []take{{"a", 11}}, refused: map[string]int{"a": 1}},
		{name: "below the mark anyone is admitted", max: 10, at: 8,
			takes: []take{{"a", 5}, {"b", 3}}, refused: map[string]int{}},
		{name: "the reserve above the mark is the newcomer's", max: 10, at: 8,
			takes: []take{{"a", 8}, {"b", 2}, {"a", 1}}, refused: map[string]int{"a": 1}},
		{name: "the newcomer keeps below its share", max: 20, at: 8,
			takes: []take{{"a", 8}, {"b", 5}}, refused: map[string]int{"b": 1}}, // share 8/2 = 4
		{name: "no Reach-Source is one anonymous caller", max: 10, at: 8,
			takes: []take{{"", 8}, {"", 1}, {"b", 1}}, refused: map[string]int{"": 1}},
		{name: "the share is at least 1", max: 6, at: 2,
			takes: []take{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"c", 1}}, refused: map[string]int{"c": 1}},
		{name: "the cap holds whatever the shares", max: 4, at: 2,
			takes: []take{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}}, refused: map[string]int{"e": 1}},
		{name: "a caller's ended tasks free its share", max: 10, at: 8,
			takes: []take{{"a", 8}, {"b", 2}}, refused: map[string]int{},
			release: []string{"b", "b", "a"}, then: []take{{"a", 2}}, thenRefused: map[string]int{"a": 1}},
		{name: "the flooder is held to its share while another holds tasks", max: 10, at: 8,
			takes: []take{{"a", 8}, {"b", 1}}, refused: map[string]int{},
			release: []string{"a", "a", "a", "a", "a"}, then: []take{{"a", 6}, {"b", 1}}, thenRefused: map[string]int{"a": 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := fairReplica(t, c.max, c.at)
			held := map[string]int{}
			admitAll := func(takes []take) map[string]int {
				refused := map[string]int{}
				for _, tk := range takes {
					for range tk.n {
						if e := d.Admit(tk.caller); e != nil {
							if e.Code != streams.CodeOverloaded {
								t.Fatalf("%s: %v", tk.caller, e)
							}
							refused[tk.caller]++
							continue
						}
						held[tk.caller]++
					}
				}
				return refused
			}
			check := func(got, want map[string]int) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("refused %v, want %v", got, want)
				}
			}
			check(admitAll(c.takes), c.refused)
			for _, caller := range c.release {
				release(d, caller)
				held[caller]--
			}
			if c.then != nil {
				check(admitAll(c.then), c.thenRefused)
			}
			var total, callers int
			for caller, n := range held {
				total += n
				if n > 0 {
					callers++
				}
				for range n {
					release(d, caller)
				}
			}
			if total > c.max {
				t.Fatalf("%d tasks admitted, cap %d", total, c.max)
			}
			a, entries := d.fair.Callers()
			if n := d.inflight.Load(); n != 0 || a != 0 {
				t.Fatalf("after every release: %d in flight, %d callers counted", n, a)
			}
			if entries != 0 {
				t.Fatalf("the shards still hold %d callers", entries)
			}
		})
	}
}

// A Refusal for the share names the caller, what it holds and its share,
// and its reply says when to try again.
func TestFairShareRefusalSaysWhy(t *testing.T) {
	d := fairReplica(t, 20, 8)
	for range 8 {
		if e := d.Admit("bob"); e != nil {
			t.Fatal(e)
		}
	}
	if e := d.Admit("alice"); e != nil {
		t.Fatal(e)
	}
	e := d.Admit("bob")
	if e == nil {
		t.Fatal("bob admitted above its share")
	}
	if want := "caller bob holds 8 of the 9 tasks in flight, its share (above 8 tasks in flight, shared by the callers holding tasks) is 4"; !strings.Contains(e.Message, want) {
		t.Fatalf("message %q lacks %q", e.Message, want)
	}
	if e := d.Admit(""); e != nil {
		t.Fatal(e) // anonymous's first: share 8/3 = 2
	}
	if e := d.Admit(""); e != nil {
		t.Fatal(e)
	}
	if e := d.Admit(""); e == nil || !strings.Contains(e.Message, "caller anonymous holds 2 ") {
		t.Fatalf("anonymous's third: %v", e)
	}
	m := nats.NewMsg("reach.task.x")
	out := Refusal(m, e)
	if out.Header.Get(headerRetryAfter) != "1" || out.Header.Get(streams.HeaderError) != string(streams.CodeOverloaded) {
		t.Fatalf("Refusal headers %v", out.Header)
	}
	if out := Refusal(m, streams.NewError(streams.CodeBadRequest, "x")); out.Header.Get(headerRetryAfter) != "" {
		t.Fatalf("BAD_REQUEST has a Retry-After: %v", out.Header)
	}
}

func TestFairShareAtIsValidated(t *testing.T) {
	for _, at := range []int{-1, 11} {
		cfg := config.Config{MaxInFlight: 10, FairShareAt: at}
		cfg.SetDefaults()
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "FairShareAt") {
			t.Fatalf("FairShareAt %d: %v", at, err)
		}
	}
}

// Admissions and releases from many goroutines at once keep the counts
// exact: never more than the cap, and nothing left once all is released.
func TestFairShareConcurrent(t *testing.T) {
	d := fairReplica(t, 64, 48)
	var wg sync.WaitGroup
	var over atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []string
			for i := range 2000 {
				caller := fmt.Sprintf("c%d", (g+i)%5)
				if i%3 == 2 && len(held) > 0 {
					release(d, held[0])
					held = held[1:]
					continue
				}
				if d.Admit(caller) == nil {
					held = append(held, caller)
				}
				if d.inflight.Load() > 64 {
					over.Add(1)
				}
			}
			for _, c := range held {
				release(d, c)
			}
		}()
	}
	wg.Wait()
	if over.Load() != 0 {
		t.Fatalf("above the cap %d times", over.Load())
	}
	if a, _ := d.fair.Callers(); d.inflight.Load() != 0 || a != 0 {
		t.Fatalf("after every release: %d in flight, %d callers counted", d.inflight.Load(), a)
	}
}

// The cost of admit and release on the hot path: many callers (each
// goroutine its own), in parallel, all admitted.
// "first" is a caller's only task (its count created and removed each
// time), "more" one more task of a caller holding others.
func BenchmarkAdmitRelease(b *testing.B) {
	for _, holding := range []bool{false, true} {
		name := map[bool]string{false: "first", true: "more"}[holding]
		b.Run(name, func(b *testing.B) {
			d := fairReplica(b, 1<<30, 1<<30-1)
			var id atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				caller := fmt.Sprintf("caller-%d", id.Add(1))
				if holding {
					if e := d.Admit(caller); e != nil {
						b.Fatal(e)
					}
					defer release(d, caller)
				}
				for pb.Next() {
					if e := d.Admit(caller); e != nil {
						b.Fatal(e)
					}
					release(d, caller)
				}
			})
		})
	}
}

// release ends a task admitted for caller as the stages do: its slot
// Freed, then its end counted for Shutdown.
func release(d *Engine, caller string) {
	d.Free(caller)
	d.tasks.Done()
}
