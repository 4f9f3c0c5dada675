package main

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
		if got := envName(flagName); got != want {
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
		headers []pair
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
			want: values{server: "def", timeout: time.Second, level: "info", headers: []pair{{"a", "1"}, {"b", "2"}}}},
		{name: "repeatable flag on the command line wins",
			args: []string{"--header", "c=3"},
			env:  map[string]string{"AGENTREACH_HEADER": "a=1"},
			want: values{server: "def", timeout: time.Second, level: "info", headers: []pair{{"c", "3"}}}},
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
			var headers pairList
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.StringVar(&got.server, "server", "def", "")
			fs.DurationVar(&got.timeout, "timeout", time.Second, "")
			fs.BoolVar(&got.demo, "demo", false, "")
			got.level = "info"
			fs.Var(checkedString{&got.level, checkLevel}, "log-level", "")
			fs.Var(&headers, "header", "")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := bindEnv(fs, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.headers = headers.pairs
			if got.server != tt.want.server || got.timeout != tt.want.timeout || got.demo != tt.want.demo ||
				got.level != tt.want.level || !equalPairs(got.headers, tt.want.headers) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func equalPairs(a, b []pair) bool {
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
		pos, err := parseArgs(fs, tt.args)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(pos, " ") != strings.Join(tt.wantPos, " ") || *asJSON != tt.wantJSON {
			t.Errorf("parseArgs(%q) = %q, json=%v; want %q, json=%v", tt.args, pos, *asJSON, tt.wantPos, tt.wantJSON)
		}
	}
}

// TestCommandEnv checks the binding through a real command: a bad variable
// is a usage error that names it, and a flag hides the variable.
func TestCommandEnv(t *testing.T) {
	t.Setenv("AGENTREACH_TIMEOUT", "forever")
	r := runCmd(t, runAgents)
	if r.code != exitUsage || !strings.Contains(r.stderr, "AGENTREACH_TIMEOUT") {
		t.Fatalf("exit %d, stderr %q; want %d naming AGENTREACH_TIMEOUT", r.code, r.stderr, exitUsage)
	}
	t.Setenv("AGENTREACH_STRATEGY", "fastest")
	r = runCmd(t, runDispatcher, "--timeout", "1s")
	if r.code != exitUsage || !strings.Contains(r.stderr, `AGENTREACH_STRATEGY="fastest"`) || strings.Contains(r.stderr, "AGENTREACH_TIMEOUT") {
		t.Fatalf("exit %d, stderr %q; want %d naming only AGENTREACH_STRATEGY", r.code, r.stderr, exitUsage)
	}
}

// TestEnvAliases sets up's and dispatcher's flags from the seeds' variable
// names: each alias sets its flag, the flag's own variable and the flag
// win over it, and a bad value names the alias.
func TestEnvAliases(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(*upFlags) any
		value   any
		wantErr string
	}{
		{name: "data dir is --data-dir's own variable", env: map[string]string{"AGENTREACH_DATA_DIR": "/data"},
			want: func(f *upFlags) any { return f.dataDir }, value: "/data"},
		{name: "TLS_ENABLED turns HTTPS on", env: map[string]string{"AGENTREACH_TLS_ENABLED": "true"},
			want: func(f *upFlags) any { return f.dispatcher.http.https() }, value: true},
		{name: "TLS_ENABLED=false leaves HTTP", env: map[string]string{"AGENTREACH_TLS_ENABLED": "false"},
			want: func(f *upFlags) any { return f.dispatcher.http.https() }, value: false},
		{name: "bad TLS_ENABLED names the alias", env: map[string]string{"AGENTREACH_TLS_ENABLED": "yes please"},
			wantErr: `AGENTREACH_TLS_ENABLED="yes please": invalid value for --http-tls: want true or false`},
		{name: "HTTP_TLS wins over TLS_ENABLED", env: map[string]string{"AGENTREACH_TLS_ENABLED": "true", "AGENTREACH_HTTP_TLS": "false"},
			want: func(f *upFlags) any { return f.dispatcher.http.tls }, value: false},
		{name: "CERT_FILE", env: map[string]string{"AGENTREACH_CERT_FILE": "/c.pem"},
			want: func(f *upFlags) any { return f.dispatcher.http.cert }, value: "/c.pem"},
		{name: "KEY_FILE", env: map[string]string{"AGENTREACH_KEY_FILE": "/k.pem"},
			want: func(f *upFlags) any { return f.dispatcher.http.key }, value: "/k.pem"},
		{name: "HTTP_CERT wins over CERT_FILE", env: map[string]string{"AGENTREACH_CERT_FILE": "/alias.pem", "AGENTREACH_HTTP_CERT": "/own.pem"},
			want: func(f *upFlags) any { return f.dispatcher.http.cert }, value: "/own.pem"},
		{name: "--http-key wins over KEY_FILE", args: []string{"--http-key", "/flag.pem"}, env: map[string]string{"AGENTREACH_KEY_FILE": "/alias.pem"},
			want: func(f *upFlags) any { return f.dispatcher.http.key }, value: "/flag.pem"},
		{name: "MAX_RESPONSE_MB is --max-payload in MiB", env: map[string]string{"AGENTREACH_MAX_RESPONSE_MB": "8"},
			want: func(f *upFlags) any { return f.maxPayload }, value: 8 << 20},
		{name: "MAX_PAYLOAD wins over MAX_RESPONSE_MB", env: map[string]string{"AGENTREACH_MAX_RESPONSE_MB": "8", "AGENTREACH_MAX_PAYLOAD": "4096"},
			want: func(f *upFlags) any { return f.maxPayload }, value: 4096},
		{name: "fractional MAX_RESPONSE_MB names the alias", env: map[string]string{"AGENTREACH_MAX_RESPONSE_MB": "0.5"},
			wantErr: `AGENTREACH_MAX_RESPONSE_MB="0.5": invalid value for --max-payload: want a whole number of MiB from 1 to 64`},
		{name: "MAX_RESPONSE_MB beyond --max-payload's bound names the alias", env: map[string]string{"AGENTREACH_MAX_RESPONSE_MB": "65"},
			wantErr: `AGENTREACH_MAX_RESPONSE_MB="65": invalid value for --max-payload: want a whole number of MiB from 1 to 64`},
		{name: "MAX_WORKERS is --max-in-flight", env: map[string]string{"AGENTREACH_MAX_WORKERS": "32"},
			want: func(f *upFlags) any { return f.dispatcher.maxInFlight }, value: 32},
		{name: "--max-in-flight wins over MAX_WORKERS", args: []string{"--max-in-flight", "7"}, env: map[string]string{"AGENTREACH_MAX_WORKERS": "32"},
			want: func(f *upFlags) any { return f.dispatcher.maxInFlight }, value: 7},
		{name: "bad MAX_WORKERS names the alias", env: map[string]string{"AGENTREACH_MAX_WORKERS": "many"},
			wantErr: `AGENTREACH_MAX_WORKERS="many": invalid value for --max-in-flight: want an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f upFlags
			fs := flag.NewFlagSet("up", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			f.dispatcher.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := bindEnv(fs, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if tt.wantErr != "" {
				if err == nil || err.Error() != "environment variable "+tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.want(&f); got != tt.value {
				t.Fatalf("got %v, want %v", got, tt.value)
			}
		})
	}
}

// TestEnvAliasesOfDispatcher: the dispatcher takes the aliases of the flags
// it has, refuses TLS_ENABLED without a certificate (it has no development
// CA), and warns about a variable that has no equivalent.
func TestEnvAliasesOfDispatcher(t *testing.T) {
	t.Setenv("AGENTREACH_HTTP", "127.0.0.1:0")
	t.Setenv("AGENTREACH_TLS_ENABLED", "true")
	t.Setenv("AGENTREACH_BUFFER_QUEUE", "500")
	r := runCmd(t, runDispatcher, "--timeout", "1s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--http-tls needs --http-cert and --http-key here") ||
		!strings.Contains(r.stderr, "warning: environment variable AGENTREACH_BUFFER_QUEUE is not used: ") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv("AGENTREACH_CERT_FILE", "/c.pem")
	if r := runCmd(t, runDispatcher, "--timeout", "1s"); r.code != exitUsage || !strings.Contains(r.stderr, "--http-cert and --http-key go together") {
		t.Fatalf("CERT_FILE without KEY_FILE: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv("AGENTREACH_MAX_WORKERS", "-")
	if r := runCmd(t, runDispatcher, "--timeout", "1s"); r.code != exitUsage || !strings.Contains(r.stderr, `AGENTREACH_MAX_WORKERS="-": invalid value for --max-in-flight`) {
		t.Fatalf("bad MAX_WORKERS: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestHelp checks that every command's --help lists every flag with its
// default and environment variable, and exits 0.
func TestHelp(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			r := runCmd(t, c.run, "--help")
			if r.code != exitOK {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, "Usage: agentreach "+c.name) {
				t.Fatalf("help does not start with the synopsis:\n%s", r.stdout)
			}
			for _, f := range commandFlags(t, c.name) {
				if !strings.Contains(r.stdout, "  --"+f+"\n") && !strings.Contains(r.stdout, "  --"+f+" ") {
					t.Errorf("help does not list --%s", f)
				}
				if !strings.Contains(r.stdout, "env "+envName(f)+"\n") && !strings.Contains(r.stdout, "env "+envName(f)+" (comma-separated)\n") &&
					!strings.Contains(r.stdout, "env "+envName(f)+" or AGENTREACH_") {
					t.Errorf("help does not name %s", envName(f))
				}
			}
		})
	}
}

// commandFlags lists the flags a command must document.
func commandFlags(t *testing.T, name string) []string {
	conn := []string{"server", "user", "password", "token", "creds", "nkey", "tls-ca", "tls-cert", "tls-key", "prefix", "log-level", "timeout"}
	switch name {
	case "up":
		return []string{"data-dir", "nats-listen", "max-payload", "http", "http-tls", "http-cert", "http-key", "sync-always", "demo", "auth", "tls", "tls-verify", "heartbeat", "instances", "slow-delay",
			"strategy", "capability-strategy", "ack-timeout", "max-in-flight", "queue-wait", "relay-results", "handlers", "queue-group", "name", "prefix", "log-level",
			"retries", "write-retries", "writes", "capability-retries", "deadline", "dead-letter-retry-interval"}
	case "dispatcher":
		return append(conn, "replicas", "heartbeat", "provision", "verifier", "http", "http-tls", "http-cert", "http-key", "ack-timeout", "max-in-flight", "queue-wait", "relay-results", "handlers", "queue-group", "strategy", "capability-strategy", "name",
			"retries", "write-retries", "writes", "capability-retries", "deadline", "dead-letter-retry-interval")
	case "demo":
		return append(conn, "instances", "slow-delay", "heartbeat", "creds-dir")
	case "auth":
		return append(conn, "dir", "type", "out", "hosts", "resolver-dir", "once", "seed-acl", "json")
	case "agents":
		return append(conn, "json")
	case "call":
		return append(conn, "agent", "affinity-key", "header", "json")
	case "submit":
		return append(conn, "wait", "request-id", "header", "json")
	case "broadcast":
		return append(conn, "quorum", "header", "json")
	case "fanout":
		return append(conn, "header", "json")
	case "result":
		return append(conn, "wait", "json")
	case "dlq":
		return append(conn, "json", "all", "new-deadline", "yes")
	case "review":
		return append(conn, "json", "all", "new-deadline", "rerun", "drop", "by")
	case "breakers", "stats":
		return append(conn, "json", "gather")
	case "caps", "policy", "workflow":
		return append(conn, "json")
	case "runs":
		return append(conn, "json", "workflow", "status")
	case "bench":
		return []string{"quick", "json-file"}
	case "conformance":
		return []string{"rules", "json", "timeout"}
	case "version", "connect":
		return nil
	case "connect mcp":
		return append(conn, "name", "url", "bearer", "ping", "id", "max-concurrent", "heartbeat")
	case "connect openapi":
		return append(conn, "name", "spec", "base-url", "header", "max-retry-after", "id", "max-concurrent", "heartbeat")
	}
	t.Fatalf("no flag list for command %q", name)
	return nil
}

func TestTopLevel(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout string // substring of stdout
		stderr string // substring of stderr
	}{
		{args: nil, code: exitUsage, stderr: "Commands:"},
		{args: []string{"--help"}, code: exitOK, stdout: "Commands:"},
		{args: []string{"help"}, code: exitOK, stdout: "call        call a capability"},
		{args: []string{"help", "call"}, code: exitOK, stdout: "Usage: agentreach call"},
		{args: []string{"frobnicate"}, code: exitUsage, stderr: `unknown command "frobnicate"` + "\n"},
		{args: []string{"agnets"}, code: exitUsage, stderr: `unknown command "agnets" (did you mean "agents"?)` + "\n"},
		{args: []string{"version"}, code: exitOK, stdout: "agentreach "},
		{args: []string{"--version"}, code: exitOK, stdout: longVersion() + "\n"},
		{args: []string{"-version"}, code: exitOK, stdout: longVersion() + "\n"},
		{args: []string{"bench", "--json-file"}, code: exitUsage, stderr: "flag needs an argument: -json-file"},
		{args: []string{"up", "--max-payload", "0"}, code: exitUsage, stderr: "--max-payload"},
		{args: []string{"call", "--no-such-flag"}, code: exitUsage, stderr: "no-such-flag"},
		{args: []string{"call"}, code: exitUsage, stderr: "want <capability>"},
		{args: []string{"call", "echo", "{not json"}, code: exitUsage, stderr: "payload is not valid JSON"},
		{args: []string{"call", "Not A Cap", "{}"}, code: exitUsage, stderr: "capability"},
		{args: []string{"call", "--agent", "a.b", "echo", "{}"}, code: exitUsage, stderr: "--agent"},
		{args: []string{"dispatcher", "--capability-strategy", "echo"}, code: exitUsage, stderr: "want key=value"},
		{args: []string{"dispatcher", "--capability-strategy", "echo=fastest"}, code: exitUsage, stderr: `unknown strategy "fastest"`},
		{args: []string{"dispatcher", "--replicas", "7"}, code: exitUsage, stderr: "replicas"},
		{args: []string{"up", "--nats-listen", "nowhere"}, code: exitUsage, stderr: "--nats-listen"},
		{args: []string{"up", "--instances", "-1"}, code: exitUsage, stderr: "--instances"},
		{args: []string{"up", "--prefix", "re*ch"}, code: exitUsage, stderr: "prefix"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runCmd(t, run, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s\nwant stdout ∋ %q, stderr ∋ %q", r.code, tt.code, r.stdout, r.stderr, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestConnOptions(t *testing.T) {
	tests := []struct {
		name    string
		c       connFlags
		wantErr string
	}{
		{"defaults", connFlags{timeout: time.Second}, ""},
		{"user and password", connFlags{user: "u", password: "p", timeout: time.Second}, ""},
		{"token and user", connFlags{token: "t", user: "u", timeout: time.Second}, "either --token or --user"},
		{"password alone", connFlags{password: "p", timeout: time.Second}, "--password needs --user"},
		{"creds and nkey", connFlags{creds: "a", nkey: "b", timeout: time.Second}, "either --creds or --nkey"},
		{"cert without key", connFlags{tlsCert: "c", timeout: time.Second}, "--tls-cert and --tls-key"},
		{"missing creds file", connFlags{creds: "/nonexistent/x.creds", timeout: time.Second}, "--creds"},
		{"missing CA file", connFlags{tlsCA: "/nonexistent/ca.pem", timeout: time.Second}, "--tls-ca"},
		{"missing nkey file", connFlags{nkey: "/nonexistent/seed.nk", timeout: time.Second}, "--nkey"},
		{"zero timeout", connFlags{}, "--timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.options("test")
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
		if got := heartbeatAge(d); got != want {
			t.Errorf("heartbeatAge(%v) = %q, want %q", d, got, want)
		}
	}
}
