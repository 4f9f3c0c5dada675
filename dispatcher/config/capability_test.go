package config

import (
	"testing"
	"time"
)

// callTimeoutOf is the call timeout of a capability without policy under
// the default Config.
func callTimeoutOf(wish, hint time.Duration) time.Duration {
	var c Config
	c.SetDefaults()
	cs := Capabilities{Config: &c}
	return cs.For("echo", nil).CallTimeout(wish, hint)
}

func TestCallTimeoutClamp(t *testing.T) {
	cases := []struct{ wish, hint, want int }{ // seconds
		{0, 0, 5}, {10, 0, 12}, {1, 20, 22}, {200, 0, 120},
	}
	for _, c := range cases {
		got := callTimeoutOf(sec(c.wish), sec(c.hint))
		if got != sec(c.want) {
			t.Errorf("callTimeout(%ds,%ds) = %v, want %ds", c.wish, c.hint, got, c.want)
		}
	}
}

func sec(n int) (d time.Duration) { return time.Duration(n) * 1e9 }

// A learned hint below the floor gives the floor (the hint is learned in
// selection.Hints).
func TestCallTimeoutOfALearnedHint(t *testing.T) {
	if got := callTimeoutOf(0, 200*time.Millisecond); got != 5*time.Second {
		t.Fatalf("call timeout %v, want the 5s floor", got)
	}
}
