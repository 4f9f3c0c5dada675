package declare_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/registry/declare"
)

func requirement(t testing.TB, src string) declare.Requirement {
	t.Helper()
	r, err := declare.ParseRequirement([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseRequirement(t *testing.T) {
	r := requirement(t, `{"labels": {"engine": "postgres"}, "limits": {"history_days": 90},
		"permissions": ["write", "read", "write"], "max_latency_ms": 500, "max_cost": 0.01}`)
	if r.Labels["engine"] != "postgres" || r.Limits["history_days"] != 90 || *r.MaxLatencyMS != 500 || *r.MaxCost != 0.01 {
		t.Fatalf("decoded %+v", r)
	}
	if strings.Join(r.Permissions, ",") != "read,write" {
		t.Fatalf("permissions %v, want sorted without duplicates", r.Permissions)
	}
	if !requirement(t, `{}`).Empty() {
		t.Fatal("{} requires something")
	}

	cases := []struct {
		name, src, want string
	}{
		{"unknown key", `{"label":{"engine":"pg"}}`, `label: unknown field (want one of labels, limits, permissions, max_latency_ms, max_cost)`},
		{"wrong type", `{"labels":{"engine":["pg"]}}`, `labels.engine: want a string, got an array`},
		{"limit type", `{"limits":{"days":"90"}}`, `limits.days: want a number, got a string`},
		{"duplicate key", `{"max_cost":1,"max_cost":2}`, `max_cost: key given twice`},
		{"not JSON", `labels: {engine: pg}`, `not valid JSON`},
		{"trailing data", `{} {}`, `unexpected data after the document`},
		{"not an object", `"fast"`, `want an object, got a string`},
		{"label name", `{"labels":{"Engine":"pg"}}`, `labels.Engine: "Engine" is not a valid name`},
		{"empty label", `{"labels":{"engine":""}}`, `labels.engine: must not be empty`},
		{"permission name", `{"permissions":["read","no way"]}`, `permissions[0]: "no way" is not a valid name`},
		{"latency", `{"max_latency_ms":0}`, `max_latency_ms: must be a positive number of milliseconds, got 0`},
		{"cost", `{"max_cost":-1}`, `max_cost: must be a finite number, 0 or more, got -1`},
		{"not UTF-8", "{\"labels\":{\"engine\":\"pg\xe4\"}}", `not valid UTF-8 (at byte 23)`},
		{"too large", `{"labels":{"a":"` + strings.Repeat("x", declare.MaxRequirementSize) + `"}}`, `more than the 4096 allowed`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := declare.ParseRequirement([]byte(tc.src))
			if !errors.Is(err, declare.ErrInvalidRequirement) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want ErrInvalidRequirement containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestMergeAndKey(t *testing.T) {
	defaults := requirement(t, `{"labels":{"engine":"postgres","region":"eu-west"},"permissions":["read"],"max_latency_ms":500,"max_cost":0.01}`)
	caller := requirement(t, `{"labels":{"region":"eu-central"},"limits":{"history_days":90},"permissions":["audit"],"max_cost":0.05}`)
	got := declare.Merge(defaults, caller)
	want := requirement(t, `{"labels":{"engine":"postgres","region":"eu-central"},"limits":{"history_days":90},
		"permissions":["audit","read"],"max_latency_ms":500,"max_cost":0.05}`)
	if got.Key() != want.Key() {
		t.Fatalf("merged %s\nwant   %s", got.Key(), want.Key())
	}
	if defaults.Labels["region"] != "eu-west" {
		t.Fatal("Merge changed its defaults")
	}
	if k := declare.Merge(declare.Requirement{}, caller).Key(); k != caller.Key() {
		t.Fatalf("merge over nothing: %s, want %s", k, caller.Key())
	}
	if k := declare.Merge(defaults, declare.Requirement{}).Key(); k != defaults.Key() {
		t.Fatalf("merge of nothing: %s, want %s", k, defaults.Key())
	}

	// Equal requirements have equal keys, whatever their order; others differ.
	a := requirement(t, `{"permissions":["b","a"],"labels":{"y":"2","x":"1"}}`)
	b := declare.Requirement{Labels: map[string]string{"x": "1", "y": "2"}, Permissions: []string{"a", "b"}}
	if a.Key() != b.Key() {
		t.Fatalf("keys differ: %s and %s", a.Key(), b.Key())
	}
	b.Permissions = []string{"b", "a"}
	if a.Key() != b.Key() {
		t.Fatalf("keys differ with unsorted permissions: %s and %s", a.Key(), b.Key())
	}
	if c := requirement(t, `{"labels":{"x":"1","y":"3"},"permissions":["a","b"]}`); c.Key() == a.Key() {
		t.Fatalf("different requirements share the key %s", a.Key())
	}
	if k := (declare.Requirement{}).Key(); k != "" {
		t.Fatalf("empty requirement's key %q", k)
	}
}

func TestMatch(t *testing.T) {
	d := compiled(t, ordersReader)
	free := compiled(t, `{"type":"free","capabilities":[{"name":"orders.query","cost":0}]}`)
	cases := []struct {
		name       string
		decl       *declare.CompiledDeclaration
		capability string // default orders.query
		req        string
		why        string // "" when it matches
	}{
		{"nothing required", d, "", `{}`, ""},
		{"everything met", d, "", `{"labels":{"engine":"postgres","region":"eu-central"},"limits":{"history_days":30,"max_rows":10},
			"permissions":["read"],"max_latency_ms":2000,"max_cost":0.002}`, ""},
		{"label value", d, "", `{"labels":{"engine":"mysql"}}`, "label engine: wants mysql, declares postgres"},
		{"label not declared", d, "", `{"labels":{"tier":"gold"}}`, "label tier: wants gold, declares none"},
		{"every failing label, by name", d, "", `{"labels":{"zone":"a","engine":"mysql","region":"eu-central"}}`,
			"label engine: wants mysql, declares postgres; label zone: wants a, declares none"},
		{"every failed condition, in a fixed order", d, "", `{"labels":{"engine":"mysql"},"limits":{"max_qps":5,"history_days":90},
			"permissions":["write","audit","read"],"max_latency_ms":500,"max_cost":0.001}`,
			"label engine: wants mysql, declares postgres; limit history_days: wants 90, declares 30; limit max_qps: wants 5, declares none; " +
				"does not declare permission audit; refuses permission write; declared timeout_ms 2000 over max_latency_ms 500; " +
				"declared cost 0.002 over max_cost 0.001"},
		{"limit", d, "", `{"limits":{"history_days":90}}`, "limit history_days: wants 90, declares 30"},
		{"limit not declared", d, "", `{"limits":{"max_qps":5}}`, "limit max_qps: wants 5, declares none"},
		{"refused permission", d, "", `{"permissions":["write"]}`, "refuses permission write"},
		{"undeclared permission", d, "", `{"permissions":["audit"]}`, "does not declare permission audit"},
		{"declared timeout", d, "", `{"max_latency_ms":500}`, "declared timeout_ms 2000 over max_latency_ms 500"},
		{"declared cost", d, "", `{"max_cost":0.001}`, "declared cost 0.002 over max_cost 0.001"},
		{"cost of an undeclared capability", d, "orders.write", `{"max_cost":1}`, "declares no cost for orders.write"},
		{"no timeout declared: latency left to the dispatcher", free, "", `{"max_latency_ms":1}`, ""},
		{"declared free", free, "", `{"max_cost":0}`, ""},
		{"no declaration, nothing required", nil, "", `{}`, ""},
		{"no declaration, latency left to the dispatcher", nil, "", `{"max_latency_ms":5}`, ""},
		{"no declaration, label", nil, "", `{"labels":{"engine":"postgres"}}`, "declares nothing: cannot show label engine"},
		{"no declaration, limit", nil, "", `{"limits":{"history_days":1}}`, "declares nothing: cannot show limit history_days"},
		{"no declaration, permission", nil, "", `{"permissions":["write","read"]}`, "declares nothing: cannot show permission read; cannot show permission write"},
		{"no declaration, everything", nil, "", `{"labels":{"engine":"postgres"},"limits":{"history_days":1},"permissions":["read"],"max_cost":5}`,
			"declares nothing: cannot show label engine; cannot show limit history_days; cannot show permission read; cannot show a cost within max_cost"},
		{"no declaration, cost", nil, "", `{"max_cost":5}`, "declares nothing: cannot show a cost within max_cost"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			capability := tc.capability
			if capability == "" {
				capability = "orders.query"
			}
			ok, why := tc.decl.Match(capability, requirement(t, tc.req))
			if ok != (tc.why == "") || why != tc.why {
				t.Fatalf("Match = %v, %q; want %v, %q", ok, why, tc.why == "", tc.why)
			}
		})
	}
}

// A passing match is on every task's path: it must not allocate.
func TestMatchDoesNotAllocate(t *testing.T) {
	d := compiled(t, ordersReader)
	r := requirement(t, `{"labels":{"engine":"postgres","region":"eu-central"},"limits":{"history_days":30},
		"permissions":["read"],"max_latency_ms":2000,"max_cost":0.01}`)
	if n := testing.AllocsPerRun(100, func() {
		if ok, why := d.Match("orders.query", r); !ok {
			t.Fatal(why)
		}
	}); n != 0 {
		t.Fatalf("a passing Match allocates %v times", n)
	}
}

func BenchmarkMatch(b *testing.B) {
	d := compiled(b, ordersReader)
	r := requirement(b, `{"labels":{"engine":"postgres","region":"eu-central"},"limits":{"history_days":30},
		"permissions":["read"],"max_latency_ms":2000,"max_cost":0.01}`)
	b.ReportAllocs()
	for b.Loop() {
		if ok, why := d.Match("orders.query", r); !ok {
			b.Fatal(why)
		}
	}
}

func BenchmarkParseRequirement(b *testing.B) {
	src := []byte(`{"labels":{"engine":"postgres"},"limits":{"history_days":90},"permissions":["read"],"max_latency_ms":500}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := declare.ParseRequirement(src); err != nil {
			b.Fatal(err)
		}
	}
}
