package bench_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agent-reach/agentreach/integration/bench"
)

// TestMain lets the registry scenario start this test binary as its
// nats-server process, and otherwise runs the tests and fails the package
// when one leaves a goroutine running.
func TestMain(m *testing.M) {
	bench.ServeChild()
	goleak.VerifyTestMain(m)
}

// TestQuickSuite runs every scenario in quick mode and checks that the
// report holds the figures `agentreach bench --json-file` promises. It checks
// no timing: CI machines (and the race detector) are too noisy for that.
func TestQuickSuite(t *testing.T) {
	methods := []string{"queue_group", "pull", "least_load", "round_robin"}
	var skewKeys []string
	for _, prefix := range []string{"", "three_slow_", "stall_"} {
		for _, m := range methods {
			for _, k := range []string{"_p50_ms", "_p99_ms", "_p999_ms", "_timeouts", "_errors"} {
				skewKeys = append(skewKeys, prefix+m+k)
			}
		}
	}
	for _, m := range methods {
		skewKeys = append(skewKeys, m+"_max_rate")
	}
	cases := []struct {
		scenario string
		positive []string // must be > 0
		present  []string // must exist (finite, any sign)
	}{
		{bench.ScenarioOverhead,
			[]string{"direct_rps", "routed_rps", "throughput_ratio", "direct_p50_us_c1", "routed_p50_us_c1", "p50_ratio_c1",
				"throughput_ratio_round_min", "throughput_ratio_round_max", "p50_ratio_c1_round_min", "p50_ratio_c1_round_max",
				"relay_rps", "relay_throughput_ratio", "relay_p50_ratio_c1", "relay_direct_rps", "relay_direct_p50_ratio_c1",
				"routed_relayed_rps", "routed_relayed_p50_ratio_c1", "routed_inproc_rps", "routed_inproc_p50_ratio_c1", "relay_agents_rps", "routed_vs_relay_agents",
				"relay_agents_direct_rps", "relay_agents_direct_p50_ratio_c1", "routed_vs_relay_agents_direct",
				"relay_proto_direct_rps", "relay_proto_direct_p50_ratio_c1", "closed_rounds",
				"direct_cpu_us_per_req_c64", "routed_cpu_us_per_req_c64", "routed_dispatcher_us_per_req_c64",
				"routed_server_us_per_req_c64", "routed_inproc_dispatcher_us_per_req_c64",
				"relay_contract_direct_rps", "relay_contract_direct_p50_ratio_c1", "routed_vs_relay_contract_direct"},
			// The bare relay's CPU is a handful of 10 ms profile samples in a
			// quick round, none at all now and then: present, not positive.
			[]string{"added_p99_us_50pct", "dispatcher_cpu_per_1k_rps", "relay_agents_direct_dispatcher_us_per_req_c64"}},
		{bench.ScenarioSkew,
			[]string{"queue_group_p99_ms", "pull_p99_ms", "least_load_p99_ms", "round_robin_p99_ms",
				"p99_ratio_vs_queue_group", "p99_ratio_vs_pull"},
			append([]string{"max_rate_ratio_vs_queue_group", "three_slow_p99_ratio_vs_queue_group", "stall_p99_ratio_vs_pull"}, skewKeys...)},
		{bench.ScenarioDurable,
			[]string{"raw_publish_rps", "header_publish_rps", "msgid_publish_rps", "submit_rps", "submit_ratio", "header_floor_ratio", "dedup_floor_ratio", "durable_e2e_available", "direct_tier_rps",
				"durable_e2e_rps", "durable_e2e_ratio"},
			[]string{"durable_e2e_p99_ms", "durable_e2e_failed"}},
		{bench.ScenarioRegistry,
			[]string{"agents_200_join_p99_ms", "agents_1000_join_p99_ms", "ttl_ms", "crash_record_gone_ms", "crash_table_gone_ms",
				"agents_1000_rss_mb", "agents_1000_server_rss_mb", "server_rss_base_mb"},
			[]string{"agents_1000_table_mb", "agents_1000_heap_mb", "agents_1000_cpu_cores", "agents_1000_server_cores",
				"server_rss_mb_per_1k_agents", "server_cores_per_1k_agents", "crash_no_task_ms"}},
		{bench.ScenarioWorkflow,
			[]string{"routed_p50_us", "workflow_p50_us", "workflow_p50_ratio", "durable_task_rps", "durable_run_rps", "durable_run_ratio"},
			[]string{"workflow_failed", "durable_run_failed", "durable_task_failed", "durable_run_p50_ms"}},
		{bench.ScenarioMatch,
			[]string{"match_agents", "match_real_responders", "match_required_rps", "match_plain_rps", "match_throughput_ratio",
				"match_throughput_ratio_round_min", "match_throughput_ratio_round_max", "match_required_instances_used",
				"match_policy_change_ms", "match_policy_change_p50_ms", "match_policy_seen_ms", "match_policy_changes"},
			[]string{"match_redirected", "match_required_failed", "match_plain_failed", "match_policy_stale_calls",
				"match_policy_not_followed", "match_policy_failed_calls", "match_throughput_ratio_no_events", "match_settle_max_ms", "goal_match_throughput_ratio", "goal_match_policy_change"}},
		{bench.ScenarioHedge,
			[]string{"hedge_off_p99_ms", "hedge_p97_p99_ms", "hedge_p95_p99_ms", "hedge_off_p999_ms", "hedge_p97_p999_ms",
				"hedge_p99_ratio", "hedge_offered_rps", "hedge_capacity_rps", "hedge_p97_calls", "hedge_off_calls"},
			[]string{"hedge_extra_deliveries", "hedge_p97_hedges", "hedge_p97_hedges_refused", "hedge_p97_refused_share",
				"hedge_p95_hedges", "hedge_p95_hedges_refused", "hedge_p97_timeouts", "hedge_off_timeouts", "hedge_p97_slow_calls",
				"hedge_p999_ratio", "goal_hedge_p99_ratio", "goal_hedge_extra_deliveries"}},
		{bench.ScenarioFanOut,
			[]string{"fanout_p50_ms", "fanout_single_p50_ms", "fanout_p50_ratio", "fanout_p50_ratio_round_min",
				"fanout_p50_ratio_round_max", "fanout_p99_ms", "fanout_single_p99_ms"},
			[]string{"fanout_failed", "fanout_single_failed", "goal_fanout_p50_ratio"}},
		{bench.ScenarioBroadcast,
			[]string{"broadcast_instances", "broadcast_gather_p50_ms", "broadcast_scatter_p50_ms", "broadcast_gather_ratio",
				"broadcast_gather_ratio_rep_min", "broadcast_gather_ratio_rep_max", "broadcast_gather_max_ms"},
			[]string{"broadcast_dropped", "broadcast_failed", "broadcast_scatter_failed", "broadcast_broadcast_dispatcher_cpu_ms", "goal_broadcast_gather_ratio"}},
		{bench.ScenarioSecurity,
			[]string{"security_off_rps_c64", "security_auth_rps_c64", "security_auth_tls_rps_c64", "security_throughput_ratio",
				"security_auth_throughput_ratio", "security_p50_ratio_c1", "security_off_p50_us_c1", "security_auth_tls_p50_us_c1",
				"security_throughput_ratio_round_min", "security_throughput_ratio_round_max", "security_rounds",
				"security_off_inproc_rps_c64", "security_auth_tls_inproc_rps_c64", "security_throughput_ratio_inproc"},
			[]string{"security_off_failed_c64", "security_auth_tls_failed_c64", "goal_security_throughput"}},
		{bench.ScenarioHTTP,
			[]string{"nats_rps", "http_rps", "http_throughput_ratio", "observability_off_rps", "observability_on_rps",
				"observability_throughput_ratio", "observability_spans_per_task"},
			[]string{"http_p99_ms", "http_failed"}},
		{bench.ScenarioConnect,
			[]string{"go_direct_p50_us", "go_connector_p50_us", "go_p50_ratio", "mcp_connector_p50_ratio"},
			[]string{"goal_mcp_connector_p50"}},
		{bench.ScenarioMCP,
			[]string{"mcp_http_rps", "mcp_rps", "mcp_throughput_ratio", "mcp_list_changed_p50_ms", "mcp_list_changed_p99_ms",
				"mcp_list_changed_capabilities"},
			[]string{"mcp_failed", "mcp_list_changed_missed"}},
		{bench.ScenarioA2A,
			[]string{"a2a_http_rps", "a2a_rps", "a2a_throughput_ratio", "micro_on_rps", "micro_off_rps", "micro_throughput_ratio"},
			[]string{"a2a_failed", "a2a_p99_ms", "goal_a2a_throughput"}},
		{bench.ScenarioStream,
			[]string{"ttfc_routed_p50_us", "ttfc_direct_p50_us", "ttfc_p50_ratio", "chunks_routed_per_s", "chunks_direct_per_s",
				"chunk_throughput_ratio", "slow_reader_overloaded", "slow_reader_others_finished", "stream_buffer_chunks"},
			[]string{"slow_reader_heap_peak_kib"}},
	}
	if got := len(bench.Scenarios()); got != len(cases) {
		t.Fatalf("Scenarios() lists %d scenarios, the test covers %d", got, len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			rep, err := bench.Run(ctx, tc.scenario, bench.Options{Quick: true, Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Scenario != tc.scenario || strings.TrimSpace(rep.Table) == "" || len(rep.Notes) == 0 {
				t.Fatalf("incomplete report: scenario %q, %d table bytes, %d notes", rep.Scenario, len(rep.Table), len(rep.Notes))
			}
			for k, v := range rep.Figures {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s = %v is not finite", k, v)
				}
			}
			for _, k := range append(tc.present, "machine_slow_ms_share", "machine_slow_stretches_per_10s", "machine_longest_slow_ms") {
				if _, ok := rep.Figures[k]; !ok {
					t.Errorf("missing figure %s", k)
				}
			}
			for _, k := range tc.positive {
				if v, ok := rep.Figures[k]; !ok || v <= 0 {
					t.Errorf("figure %s = %v (present %v), want > 0", k, v, ok)
				}
			}
		})
	}
	if _, err := bench.Run(context.Background(), "nope", bench.Options{Quick: true}); !errors.Is(err, bench.ErrUnknownScenario) {
		t.Fatalf("unknown scenario: %v", err)
	}
}
