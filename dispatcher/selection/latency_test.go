package selection

import (
	"testing"
	"time"

	"github.com/agent-reach/agentreach/registry"
)

func TestTimeoutHintIsLearnedPerTypeUnlessDeclared(t *testing.T) {
	var d Hints
	for i := range 100 {
		ms := 10
		if i%20 == 0 { // 5% slow outliers
			ms = 100
		}
		d.Type("llm").Observe(time.Duration(ms) * time.Millisecond)
	}
	learned := d.TimeoutHint(&registry.Entry{Record: registry.Record{Type: "llm"}})
	if learned != 200*time.Millisecond {
		t.Fatalf("learned hint %v, want 2 × p95 = 200ms", learned)
	}
	declared := d.TimeoutHint(&registry.Entry{Record: registry.Record{Type: "llm", TimeoutHintMS: 30000}})
	if declared != 30*time.Second {
		t.Fatalf("declared hint %v, want 30s", declared)
	}
	if h := d.TimeoutHint(&registry.Entry{Record: registry.Record{Type: "new"}}); h != 0 {
		t.Fatalf("a type never seen has hint %v", h)
	}
	for range latencySamples { // the type got slower: the hint follows the recent samples
		d.Type("llm").Observe(400 * time.Millisecond)
	}
	if h := d.TimeoutHint(&registry.Entry{Record: registry.Record{Type: "llm"}}); h != 800*time.Millisecond {
		t.Fatalf("hint after %d slower tasks %v, want 800ms", latencySamples, h)
	}
}
