package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
)

// allowList admits the records of the ids it holds; changing it raises its
// revision.
type allowList struct {
	mu      sync.Mutex
	ids     []string
	rev     atomic.Uint64
	checked atomic.Int64
}

func (a *allowList) CheckRecord(e *registry.Entry) error {
	a.checked.Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if slices.Contains(a.ids, e.ID) {
		return nil
	}
	return errors.New("not allowed")
}

func (a *allowList) FilterRevision() uint64 { return a.rev.Load() }

func (a *allowList) set(ids ...string) {
	a.mu.Lock()
	a.ids = ids
	a.mu.Unlock()
	a.rev.Add(1)
}

// TestTableRecordFilter checks that Candidates offers only the records the
// filter admits, asks it when routes are built rather than per call, and
// follows a change of the filter's revision without any change in the
// bucket; Offering and Lookup still list every record.
func TestTableRecordFilter(t *testing.T) {
	reg, _ := setup(t, 200*time.Millisecond)
	ctx := context.Background()
	for _, id := range []string{"good-1", "bad-1"} {
		if _, err := reg.Put(ctx, rec(id, "math.add")); err != nil {
			t.Fatal(err)
		}
	}
	f := &allowList{}
	f.set("good-1")
	tab := registry.NewTable(reg, registry.WithRecordFilter(f))
	if err := tab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	ids := func() []string {
		rs := tab.Candidates("math.add")
		var out []string
		for i := 0; i < rs.Len(); i++ {
			out = append(out, rs.Instances[i].ID)
		}
		return out
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := len(tab.Offering("math.add")); got != 2 {
			return fmt.Errorf("offering %d, want 2", got)
		}
		return nil
	})
	if got := ids(); !slices.Equal(got, []string{"good-1"}) {
		t.Fatalf("candidates %v, want [good-1]", got)
	}
	checked := f.checked.Load()
	for range 100 {
		ids()
	}
	if n := f.checked.Load(); n != checked {
		t.Fatalf("the filter was asked %d more times by 100 calls with nothing changed", n-checked)
	}
	if _, ok := tab.Lookup("bad-1"); !ok {
		t.Fatal("a refused record left the table")
	}
	f.set("good-1", "bad-1") // the filter admits it now: no put needed
	if got := ids(); !slices.Equal(got, []string{"bad-1", "good-1"}) {
		t.Fatalf("candidates %v after the filter admits bad-1", got)
	}
	f.set()
	if got := ids(); len(got) != 0 {
		t.Fatalf("candidates %v after the filter refuses both", got)
	}
}
