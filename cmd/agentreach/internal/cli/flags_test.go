package cli

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestEnvName(t *testing.T) {
	for flagName, want := range map[string]string{
		"server":     "AGENTREACH_SERVER",
		"data-dir":   "AGENTREACH_DATA_DIR",
		"tls-ca":     "AGENTREACH_TLS_CA",
		"slow-delay": "AGENTREACH_SLOW_DELAY",
	} {
		if got := EnvName(flagName); got != want {
			t.Errorf("envName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

func TestBindEnv(t *testing.T) {
	type values struct {
		server  string
		timeout time.Duration
		demo    bool
		level   string
		headers []Pair
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    values
		wantErr string // substring; "" means no error
	}{
		{name: "defaults", want: values{server: "def", timeout: time.Second, level: "info"}},
		{name: "env sets unset flags",
			env:  map[string]string{"AGENTREACH_SERVER": "nats://a:1", "AGENTREACH_TIMEOUT": "5s", "AGENTREACH_DEMO": "true", "AGENTREACH_LOG_LEVEL": "debug"},
			want: values{server: "nats://a:1", timeout: 5 * time.Second, demo: true, level: "debug"}},
		{name: "explicit flag wins",
			args: []string{"--server", "nats://flag:1", "--demo=false"},
			env:  map[string]string{"AGENTREACH_SERVER": "nats://env:1", "AGENTREACH_DEMO": "true"},
			want: values{server: "nats://flag:1", timeout: time.Second, level: "info"}},
		{name: "empty variable is unset",
			env:  map[string]string{"AGENTREACH_SERVER": ""},
			want: values{server: "def", timeout: time.Second, level: "info"}},
		{name: "repeatable flag reads a list",
			env:  map[string]string{"AGENTREACH_HEADER": "a=1, b=2"},
			want: values{server: "def", timeout: time.Second, level: "info", headers: []Pair{{"a", "1"}, {"b", "2"}}}},
		{name: "repeatable flag on the command line wins",
			args: []string{"--header", "c=3"},
			env:  map[string]string{"AGENTREACH_HEADER": "a=1"},
			want: values{server: "def", timeout: time.Second, level: "info", headers: []Pair{{"c", "3"}}}},
		{name: "bad duration names the variable",
			env: map[string]string{"AGENTREACH_TIMEOUT": "soon"}, wantErr: `AGENTREACH_TIMEOUT="soon": invalid value for --timeout: want a duration`},
		{name: "bad bool names the variable",
			env: map[string]string{"AGENTREACH_DEMO": "yes"}, wantErr: `AGENTREACH_DEMO="yes": invalid value for --demo: want true or false`},
		{name: "checked value names the variable",
			env: map[string]string{"AGENTREACH_LOG_LEVEL": "loud"}, wantErr: `AGENTREACH_LOG_LEVEL="loud": invalid value for --log-level: unknown log level`},
		{name: "bad pair names the variable",
			env: map[string]string{"AGENTREACH_HEADER": "novalue"}, wantErr: `AGENTREACH_HEADER="novalue": invalid value for --header: want key=value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got values
			var headers PairList
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.StringVar(&got.server, "server", "def", "")
			fs.DurationVar(&got.timeout, "timeout", time.Second, "")
			fs.BoolVar(&got.demo, "demo", false, "")
			got.level = "info"
			fs.Var(CheckedString{V: &got.level, Check: CheckLevel}, "log-level", "")
			fs.Var(&headers, "header", "")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := BindEnv(fs, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.headers = headers.Pairs
			if got.server != tt.want.server || got.timeout != tt.want.timeout || got.demo != tt.want.demo ||
				got.level != tt.want.level || !equalPairs(got.headers, tt.want.headers) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func equalPairs(a, b []Pair) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseArgsInterspersed(t *testing.T) {
	tests := []struct {
		args     []string
		wantPos  []string
		wantJSON bool
	}{
		{[]string{"echo", "{}"}, []string{"echo", "{}"}, false},
		{[]string{"--json", "echo", "{}"}, []string{"echo", "{}"}, true},
		{[]string{"echo", "--json", "{}"}, []string{"echo", "{}"}, true},
		{[]string{"echo", "{}", "--json"}, []string{"echo", "{}"}, true},
		{[]string{"echo", "--", "--json"}, []string{"echo", "--json"}, false},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "")
		pos, err := ParseArgs(fs, tt.args)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(pos, " ") != strings.Join(tt.wantPos, " ") || *asJSON != tt.wantJSON {
			t.Errorf("parseArgs(%q) = %q, json=%v; want %q, json=%v", tt.args, pos, *asJSON, tt.wantPos, tt.wantJSON)
		}
	}
}

func TestConnOptions(t *testing.T) {
	tests := []struct {
		name    string
		c       ConnFlags
		wantErr string
	}{
		{"defaults", ConnFlags{Timeout: time.Second}, ""},
		{"user and password", ConnFlags{User: "u", Password: "p", Timeout: time.Second}, ""},
		{"token and user", ConnFlags{Token: "t", User: "u", Timeout: time.Second}, "either --token or --user"},
		{"password alone", ConnFlags{Password: "p", Timeout: time.Second}, "--password needs --user"},
		{"creds and nkey", ConnFlags{Creds: "a", Nkey: "b", Timeout: time.Second}, "either --creds or --nkey"},
		{"cert without key", ConnFlags{TLSCert: "c", Timeout: time.Second}, "--tls-cert and --tls-key"},
		{"missing creds file", ConnFlags{Creds: "/nonexistent/x.creds", Timeout: time.Second}, "--creds"},
		{"missing CA file", ConnFlags{TLSCA: "/nonexistent/ca.pem", Timeout: time.Second}, "--tls-ca"},
		{"missing nkey file", ConnFlags{Nkey: "/nonexistent/seed.nk", Timeout: time.Second}, "--nkey"},
		{"zero timeout", ConnFlags{}, "--timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.Options("test")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatal(err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestHeartbeatAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0s",
		1234 * time.Millisecond:               "1.2s",
		90*time.Second + 400*time.Millisecond: "1m30s",
	} {
		if got := HeartbeatAge(d); got != want {
			t.Errorf("heartbeatAge(%v) = %q, want %q", d, got, want)
		}
	}
}
