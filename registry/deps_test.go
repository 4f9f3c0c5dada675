package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry"
)

func TestRecordDeps(t *testing.T) {
	for name, tc := range map[string]struct {
		deps map[string]string
		want string
	}{
		"states":     {map[string]string{"ext.orders-db": registry.DepUp, "ext.cache": registry.DepDegraded, "ext.s3": registry.DepDown}, ""},
		"bad state":  {map[string]string{"ext.orders-db": "flaky"}, `deps.ext.orders-db must be "up", "degraded" or "down", got "flaky"`},
		"bad name":   {map[string]string{"Orders DB": "up"}, `deps: invalid name`},
		"first name": {map[string]string{"b": "x", "a": "y"}, `deps.a must be`},
	} {
		t.Run(name, func(t *testing.T) {
			r := rec("a-1", "echo")
			r.Deps = tc.deps
			r.Normalize()
			err := r.Validate()
			if tc.want == "" && err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && (!errors.Is(err, registry.ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("want ErrInvalidRecord containing %q, got %v", tc.want, err)
			}
		})
	}
	e := registry.Entry{Record: rec("a-1", "echo")}
	if got := e.DownDependencies(); got != nil {
		t.Fatalf("a record without deps reports %v down", got)
	}
	e.Deps = map[string]string{"ext.z": registry.DepDown, "ext.b": registry.DepDegraded, "ext.c": registry.DepDown}
	if got := e.DownDependencies(); !slices.Equal(got, []string{"ext.c", "ext.z"}) {
		t.Fatalf("DownDependencies = %q, want [ext.c ext.z] (every one down, by name)", got)
	}
}

// A change of deps alone is not a heartbeat: the table wakes Changed and
// rebuilds the routes, so a dispatcher re-filters its candidates.
func TestTableFollowsDepsChanges(t *testing.T) {
	reg, _ := setup(t, 0)
	ctx := context.Background()
	r := rec("db-1", "orders.query")
	r.Deps = map[string]string{"ext.orders-db": registry.DepUp}
	if _, err := reg.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	tab := registry.NewTable(reg)
	if err := tab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	before := tab.Candidates("orders.query")
	changed := tab.Changed()

	r.Deps = map[string]string{"ext.orders-db": registry.DepDown}
	if _, err := reg.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("a deps change did not wake Changed")
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		inst, ok := tab.Lookup("db-1")
		if !ok || !slices.Equal(inst.DownDependencies(), []string{"ext.orders-db"}) {
			return fmt.Errorf("instance does not report ext.orders-db down")
		}
		return nil
	})
	after := tab.Candidates("orders.query")
	if after == before || after.Len() != 1 {
		t.Fatalf("routes not rebuilt after a deps change (same: %v, len %d)", after == before, after.Len())
	}
}
