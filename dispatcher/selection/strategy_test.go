package selection

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/registry"
)

func routes(weights ...int) *registry.Routes {
	insts := make([]*registry.Instance, len(weights))
	for i, w := range weights {
		insts[i] = registry.NewInstance(registry.Entry{Record: registry.Record{
			ID: fmt.Sprintf("i%d", i), Capabilities: []string{"c"}, MaxConcurrent: 4, Weight: w, Status: registry.StatusReady}})
	}
	return registry.NewRoutes(insts)
}

// testTask is a task as the strategies see it.
type testTask struct {
	triedIDs []string
	affinity string
	prefer   string
}

func (t *testTask) Tried(id string) bool { return slices.Contains(t.triedIDs, id) }
func (t *testTask) AffinityKey() string  { return t.affinity }
func (t *testTask) Preference() string   { return t.prefer }

// testPicker is a Picker with the dispatcher's default breaker and penalty.
func testPicker(t *testing.T) *Picker {
	t.Helper()
	cfg := BreakerConfig{}
	cfg.SetDefaults()
	return &Picker{Loads: &Loads{Breaker: &cfg, PenaltyDecay: 5 * time.Minute}}
}

func counts(t *testing.T, d *Picker, s strategy, rs *registry.Routes, n int, tk Task) []int {
	t.Helper()
	out := make([]int, rs.Len())
	for range n {
		i := s(d, "c", rs, tk)
		if i < 0 {
			t.Fatal("no pick")
		}
		out[i]++
	}
	return out
}

func TestRoundRobinIsExact(t *testing.T) {
	d := testPicker(t)
	got := counts(t, d, roundRobin, routes(1, 5, 9), 300, &testTask{})
	for i, c := range got {
		if c != 100 {
			t.Fatalf("instance %d got %d of 300", i, c)
		}
	}
}

func TestWeightedRoundRobinIsExactPerCycleAndInterleaved(t *testing.T) {
	d := testPicker(t)
	rs := routes(100, 200, 300)
	got := counts(t, d, weightedRoundRobin, rs, 600*3, &testTask{})
	if got[0] != 300 || got[1] != 600 || got[2] != 900 {
		t.Fatalf("shares %v, want 300/600/900", got)
	}
	// Interleaved: the heaviest never runs more than a few times in a row.
	run, longest, prev := 0, 0, -1
	for range 600 {
		i := weightedRoundRobin(d, "c", rs, &testTask{})
		if i == prev {
			run++
		} else {
			run = 1
		}
		prev, longest = i, max(longest, run)
	}
	if longest > 4 {
		t.Fatalf("runs of %d picks of one instance: not interleaved", longest)
	}
}

func TestLeastLoadSharesByWeightWhenIdleAndAvoidsLoad(t *testing.T) {
	d := testPicker(t)
	rs := routes(100, 300)
	got := counts(t, d, leastLoad, rs, 40000, &testTask{})
	if share := float64(got[1]) / 40000; math.Abs(share-0.75) > 0.02 {
		t.Fatalf("idle share of the weight-300 instance %.3f, want 0.75", share)
	}
	// Load the heavy one: it should now lose every comparison it is in.
	d.Loads.Of("i1").Inflight.Store(4)
	got = counts(t, d, leastLoad, rs, 10000, &testTask{})
	if got[1] != 0 { // every pick compares both
		t.Fatalf("loaded instance still got %d of 10000", got[1])
	}
}

func TestStrategiesSkipTriedInstances(t *testing.T) {
	d := testPicker(t)
	rs := routes(1, 1, 1)
	for name, s := range strategies {
		tk := &testTask{triedIDs: []string{"i0", "i2"}, affinity: "k"}
		for range 50 {
			if i := s(d, "c", rs, tk); i != 1 {
				t.Fatalf("%s picked %d, want the only untried (1)", name, i)
			}
		}
		tk.triedIDs = append(tk.triedIDs, "i1")
		if i := s(d, "c", rs, tk); i != -1 {
			t.Fatalf("%s picked %d with every instance tried", name, i)
		}
	}
}

func TestHashIsStickyAndMovesOnlyTheLeaversKeys(t *testing.T) {
	d := testPicker(t)
	full := routes(1, 1, 1, 1)
	before := map[string]string{}
	for k := range 1000 {
		key := fmt.Sprintf("user-%d", k)
		i := consistentHash(d, "c", full, &testTask{affinity: key})
		if j := consistentHash(d, "c", full, &testTask{affinity: key}); j != i {
			t.Fatalf("key %s moved between picks", key)
		}
		before[key] = full.Instances[i].ID
	}
	// Remove i3: only its keys may move.
	less := registry.NewRoutes(full.Instances[:3:3])
	moved := 0
	for key, was := range before {
		now := less.Instances[consistentHash(d, "c", less, &testTask{affinity: key})].ID
		if now != was {
			if was != "i3" {
				t.Fatalf("key %s moved from %s to %s though %s stayed", key, was, now, was)
			}
			moved++
		}
	}
	if moved < 150 || moved > 350 {
		t.Fatalf("%d keys moved, want about a quarter", moved)
	}
}

func TestLeastLoadAvoidsASlowIdleInstanceAndProbesItLater(t *testing.T) {
	d := testPicker(t)
	rs := routes(100, 100, 100, 100)
	now := time.Now()
	for i, ms := range []int{20, 2, 2, 2} {
		for range minSamples {
			d.Loads.Of(fmt.Sprintf("i%d", i)).Observe(time.Duration(ms)*time.Millisecond, now)
		}
	}
	got := counts(t, d, leastLoad, rs, 10000, &testTask{})
	if got[0] != 0 {
		t.Fatalf("the 10× slower idle instance got %d of 10000 picks", got[0])
	}
	// Noise below the margin does not count as slower.
	if clearlySlower(float64(time.Millisecond), float64(300*time.Microsecond)) {
		t.Fatal("differences below the margin must not count")
	}
	// After a long quiet spell the slow instance's average has faded: it is
	// probed again.
	d.Loads.Of("i0").lastAt = now.Add(-time.Minute)
	got = counts(t, d, leastLoad, rs, 10000, &testTask{})
	if got[0] == 0 {
		t.Fatal("a long-idle slow instance is never probed again")
	}
}

// One slow first task (a cold start, the machine stalling) must not make an
// instance look slower than its peers once minSamples tasks are in; an
// instance slow throughout still does.
func TestOneSlowFirstTaskDoesNotBrandAnInstance(t *testing.T) {
	d := testPicker(t)
	now := time.Now()
	outlier, steady, slow := d.Loads.Of("outlier"), d.Loads.Of("steady"), d.Loads.Of("slow")
	for i := range minSamples {
		first := 2 * time.Millisecond
		if i == 0 {
			first = 40 * time.Millisecond
		}
		outlier.Observe(first, now)
		steady.Observe(2*time.Millisecond, now)
		slow.Observe(20*time.Millisecond, now)
	}
	o, s, w := outlier.CurrentLatency(now), steady.CurrentLatency(now), slow.CurrentLatency(now)
	if clearlySlower(o, s) {
		t.Fatalf("one 40 ms task among %d of 2 ms: average %v against %v, judged slower", minSamples, time.Duration(o), time.Duration(s))
	}
	if !clearlySlower(w, s) {
		t.Fatalf("an instance at 20 ms throughout: average %v against %v, not judged slower", time.Duration(w), time.Duration(s))
	}
}
