package inspect

import (
	"bytes"
	"strings"
	"testing"
)

// TestPrintBreakers: the latency column says it is a moving average, and
// an instance without enough samples for one shows "-", not 0.0ms.
func TestPrintBreakers(t *testing.T) {
	reply := []byte(`{"dispatcher": "d1", "breakers": [
		{"instance": "echo-new", "state": "CLOSED", "latency_ms": 0},
		{"instance": "echo-old", "state": "CLOSED", "window_total": 9, "share": 1, "latency_ms": 12.34}]}`)
	var out bytes.Buffer
	if err := printBreakers(&out, [][]byte{reply}, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "LATENCY (MOVING AVG)") ||
		!strings.HasSuffix(lines[1], " -") || !strings.HasPrefix(lines[1], "d1  ") || !strings.Contains(lines[1], "echo-new") ||
		!strings.HasSuffix(lines[2], " 12.3ms") {
		t.Fatalf("table:\n%s", out.String())
	}
}
