package selection

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

func testBreaker(cfg BreakerConfig) *Breaker {
	cfg.SetDefaults()
	b := NewBreaker(&cfg)
	b.rand = func() float64 { return 0.999 } // ramp admission: deterministic "no" below share 1
	return b
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	b := testBreaker(BreakerConfig{})
	now := time.Unix(1000, 0)
	for i := range 9 {
		if _, changed := b.Record(now, false, false, b.cfg); changed {
			t.Fatalf("opened after %d failures", i+1)
		}
	}
	if st, changed := b.Record(now, false, false, b.cfg); !changed || st != BreakerOpen {
		t.Fatal("10th consecutive failure did not open")
	}
	if ok, _ := b.Allow(now.Add(4*time.Second), b.cfg); ok {
		t.Fatal("admitted during cooldown")
	}
	// Half-open: exactly 3 probes, then closed with a ramp.
	at := now.Add(5 * time.Second)
	for i := range 3 {
		ok, probe := b.Allow(at, b.cfg)
		if !ok || !probe {
			t.Fatalf("probe %d not admitted", i+1)
		}
	}
	if ok, _ := b.Allow(at, b.cfg); ok {
		t.Fatal("a 4th probe was admitted")
	}
	for i := range 3 {
		st, changed := b.Record(at, true, true, b.cfg)
		if (i < 2 && changed) || (i == 2 && st != BreakerClosed) {
			t.Fatalf("probe success %d: %v %v", i+1, st, changed)
		}
	}
	for stage, want := range []float64{0.25, 0.5, 1, 1} {
		if got := b.Status(at.Add(time.Duration(stage) * 5 * time.Second)).Share; got != want {
			t.Fatalf("ramp stage %d share %v, want %v", stage, got, want)
		}
	}
}

func TestBreakerOpensOnFailureRatio(t *testing.T) {
	b := testBreaker(BreakerConfig{})
	now := time.Unix(1000, 0)
	// Alternate so the consecutive rule never fires; 11 of 21 fail.
	for i := range 21 {
		st, changed := b.Record(now.Add(time.Duration(i)*time.Second), i%2 == 1, false, b.cfg)
		if changed {
			if i < 20 || st != BreakerOpen {
				t.Fatalf("changed to %v at outcome %d", st, i+1)
			}
			return
		}
	}
	t.Fatal("a failure ratio above 50% over 21 outcomes did not open the breaker")
}

// The breaker against a model of its specification, over random sequences
// of clock steps, admissions and outcomes.
func TestBreakerStateMachineProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := BreakerConfig{
			ConsecutiveFailures: rapid.IntRange(1, 5).Draw(rt, "consecutive"),
			MinVolume:           1000, // ratio rule off: the model covers the consecutive rule
			Cooldown:            time.Duration(rapid.IntRange(1, 5).Draw(rt, "cooldown_s")) * time.Second,
			Probes:              rapid.IntRange(1, 4).Draw(rt, "probes"),
			Ramp:                []float64{1},
		}
		b := testBreaker(cfg)
		now := time.Unix(1_000_000, 0)
		// model
		state, consecutive, probesOut, probeOK := BreakerClosed, 0, 0, 0
		var openedAt time.Time
		var pendingProbes int
		for step := range rapid.IntRange(1, 200).Draw(rt, "steps") {
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				now = now.Add(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "ms")) * time.Millisecond)
			case 1:
				if state == BreakerOpen && now.Sub(openedAt) >= b.cfg.Cooldown {
					state, probesOut, probeOK, pendingProbes = BreakerHalfOpen, 0, 0, 0
				}
				ok, probe := b.Allow(now, b.cfg)
				wantOK := state == BreakerClosed || (state == BreakerHalfOpen && probesOut < cfg.Probes)
				if ok != wantOK || probe != (state == BreakerHalfOpen && ok) {
					rt.Fatalf("step %d: allow=%v probe=%v in model state %s (probes out %d)", step, ok, probe, state, probesOut)
				}
				if probe {
					probesOut++
					pendingProbes++
				}
			case 2:
				success := rapid.Bool().Draw(rt, "success")
				probe := pendingProbes > 0 && rapid.Bool().Draw(rt, "is_probe")
				if probe {
					pendingProbes--
				}
				got, changed := b.Record(now, success, probe, b.cfg)
				want, wantChanged := BreakerState(""), false
				switch {
				case state == BreakerClosed && success:
					consecutive = 0
				case state == BreakerClosed:
					if consecutive++; consecutive >= cfg.ConsecutiveFailures {
						state, openedAt, consecutive, want, wantChanged = BreakerOpen, now, 0, BreakerOpen, true
					}
				case state == BreakerHalfOpen && probe && !success:
					state, openedAt, want, wantChanged = BreakerOpen, now, BreakerOpen, true
				case state == BreakerHalfOpen && probe:
					if probeOK++; probeOK >= cfg.Probes {
						state, consecutive, want, wantChanged = BreakerClosed, 0, BreakerClosed, true
					}
				}
				if got != want || changed != wantChanged {
					rt.Fatalf("step %d: record(success=%v, probe=%v) = %q,%v; model says %q,%v", step, success, probe, got, changed, want, wantChanged)
				}
			}
		}
	})
}

// Loads.Breakers lists every instance's breaker, sorted by instance id.
func TestLoadsBreakersSorted(t *testing.T) {
	cfg := BreakerConfig{}
	cfg.SetDefaults()
	ls := Loads{Breaker: &cfg, PenaltyDecay: time.Minute}
	for _, id := range []string{"c", "a", "b"} {
		ls.Of(id)
	}
	got := ls.Breakers(time.Now())
	if len(got) != 3 || got[0].Instance != "a" || got[1].Instance != "b" || got[2].Instance != "c" {
		t.Fatalf("Breakers = %+v, want a, b, c", got)
	}
	for _, s := range got {
		if s.State != BreakerClosed {
			t.Errorf("%s: state %v, want closed", s.Instance, s.State)
		}
	}
}
