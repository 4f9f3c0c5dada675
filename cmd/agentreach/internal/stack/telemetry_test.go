package stack

import (
	"context"
	"testing"
)

func TestTracingIsOffUnlessTheEnvironmentAsks(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if got := tracingWanted(lookup); got != tc.want {
			t.Errorf("%v: tracing %v, want %v", tc.env, got, tc.want)
		}
		tp, err := tracerProvider(context.Background(), lookup)
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if (tp != nil) != tc.want {
			t.Errorf("%v: provider %v, want one: %v", tc.env, tp, tc.want)
		}
		if tp != nil {
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Errorf("%v: shutdown: %v", tc.env, err)
			}
		}
	}
}
