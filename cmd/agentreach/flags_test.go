package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/inspect"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/stack"
)

// TestCommandEnv checks the binding through a real command: a bad variable
// is a usage error that names it, and a flag hides the variable.
func TestCommandEnv(t *testing.T) {
	t.Setenv("AGENTREACH_TIMEOUT", "forever")
	r := clitest.RunCmd(t, inspect.RunAgents)
	if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "AGENTREACH_TIMEOUT") {
		t.Fatalf("exit %d, stderr %q; want %d naming AGENTREACH_TIMEOUT", r.Code, r.Stderr, cli.ExitUsage)
	}
	t.Setenv("AGENTREACH_STRATEGY", "fastest")
	r = clitest.RunCmd(t, stack.RunDispatcher, "--timeout", "1s")
	if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, `AGENTREACH_STRATEGY="fastest"`) || strings.Contains(r.Stderr, "AGENTREACH_TIMEOUT") {
		t.Fatalf("exit %d, stderr %q; want %d naming only AGENTREACH_STRATEGY", r.Code, r.Stderr, cli.ExitUsage)
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
		want    func(*stack.UpFlags) any
		value   any
		wantErr string
	}{
		{name: "data dir is --data-dir's own variable", env: map[string]string{"AGENTREACH_DATA_DIR": "/data"},
			want: func(f *stack.UpFlags) any { return f.DataDir }, value: "/data"},
		{name: "TLS_ENABLED turns HTTPS on", env: map[string]string{"AGENTREACH_TLS_ENABLED": "true"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.HTTP.HTTPS() }, value: true},
		{name: "TLS_ENABLED=false leaves HTTP", env: map[string]string{"AGENTREACH_TLS_ENABLED": "false"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.HTTP.HTTPS() }, value: false},
		{name: "bad TLS_ENABLED names the alias", env: map[string]string{"AGENTREACH_TLS_ENABLED": "yes please"},
			wantErr: `AGENTREACH_TLS_ENABLED="yes please": invalid value for --http-tls: want true or false`},
		{name: "HTTP_TLS wins over TLS_ENABLED", env: map[string]string{"AGENTREACH_TLS_ENABLED": "true", "AGENTREACH_HTTP_TLS": "false"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.HTTP.TLS }, value: false},
		{name: "CERT_FILE", env: map[string]string{"AGENTREACH_CERT_FILE": "/c.pem"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.HTTP.Cert }, value: "/c.pem"},
		{name: "KEY_FILE", env: map[string]string{"AGENTREACH_KEY_FILE": "/k.pem"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.HTTP.Key }, value: "/k.pem"},
		{name: "HTTP_CERT wins over CERT_FILE", env: map[string]string{"AGENTREACH_CERT_FILE": "/alias.pem", "AGENTREACH_HTTP_CERT": "/own.pem"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.HTTP.Cert }, value: "/own.pem"},
		{name: "--http-key wins over KEY_FILE", args: []string{"--http-key", "/flag.pem"}, env: map[string]string{"AGENTREACH_KEY_FILE": "/alias.pem"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.HTTP.Key }, value: "/flag.pem"},
		{name: "MAX_RESPONSE_MB is --max-payload in MiB", env: map[string]string{"AGENTREACH_MAX_RESPONSE_MB": "8"},
			want: func(f *stack.UpFlags) any { return f.MaxPayload }, value: 8 << 20},
		{name: "MAX_PAYLOAD wins over MAX_RESPONSE_MB", env: map[string]string{"AGENTREACH_MAX_RESPONSE_MB": "8", "AGENTREACH_MAX_PAYLOAD": "4096"},
			want: func(f *stack.UpFlags) any { return f.MaxPayload }, value: 4096},
		{name: "fractional MAX_RESPONSE_MB names the alias", env: map[string]string{"AGENTREACH_MAX_RESPONSE_MB": "0.5"},
			wantErr: `AGENTREACH_MAX_RESPONSE_MB="0.5": invalid value for --max-payload: want a whole number of MiB from 1 to 64`},
		{name: "MAX_RESPONSE_MB beyond --max-payload's bound names the alias", env: map[string]string{"AGENTREACH_MAX_RESPONSE_MB": "65"},
			wantErr: `AGENTREACH_MAX_RESPONSE_MB="65": invalid value for --max-payload: want a whole number of MiB from 1 to 64`},
		{name: "MAX_WORKERS is --max-in-flight", env: map[string]string{"AGENTREACH_MAX_WORKERS": "32"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.MaxInFlight }, value: 32},
		{name: "--max-in-flight wins over MAX_WORKERS", args: []string{"--max-in-flight", "7"}, env: map[string]string{"AGENTREACH_MAX_WORKERS": "32"},
			want: func(f *stack.UpFlags) any { return f.Dispatcher.MaxInFlight }, value: 7},
		{name: "bad MAX_WORKERS names the alias", env: map[string]string{"AGENTREACH_MAX_WORKERS": "many"},
			wantErr: `AGENTREACH_MAX_WORKERS="many": invalid value for --max-in-flight: want an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f stack.UpFlags
			fs := flag.NewFlagSet("up", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.Register(fs)
			f.Dispatcher.Register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := cli.BindEnv(fs, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
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
	r := clitest.RunCmd(t, stack.RunDispatcher, "--timeout", "1s")
	if r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "--http-tls needs --http-cert and --http-key here") ||
		!strings.Contains(r.Stderr, "warning: environment variable AGENTREACH_BUFFER_QUEUE is not used: ") {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
	t.Setenv("AGENTREACH_CERT_FILE", "/c.pem")
	if r := clitest.RunCmd(t, stack.RunDispatcher, "--timeout", "1s"); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, "--http-cert and --http-key go together") {
		t.Fatalf("CERT_FILE without KEY_FILE: exit %d, stderr %q", r.Code, r.Stderr)
	}
	t.Setenv("AGENTREACH_MAX_WORKERS", "-")
	if r := clitest.RunCmd(t, stack.RunDispatcher, "--timeout", "1s"); r.Code != cli.ExitUsage || !strings.Contains(r.Stderr, `AGENTREACH_MAX_WORKERS="-": invalid value for --max-in-flight`) {
		t.Fatalf("bad MAX_WORKERS: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// TestHelp checks that every command's --help lists every flag with its
// default and environment variable, and exits 0.
func TestHelp(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			r := clitest.RunCmd(t, c.run, "--help")
			if r.Code != cli.ExitOK {
				t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
			}
			if !strings.HasPrefix(r.Stdout, "Usage: agentreach "+c.name) {
				t.Fatalf("help does not start with the synopsis:\n%s", r.Stdout)
			}
			for _, f := range commandFlags(t, c.name) {
				if !strings.Contains(r.Stdout, "  --"+f+"\n") && !strings.Contains(r.Stdout, "  --"+f+" ") {
					t.Errorf("help does not list --%s", f)
				}
				if !strings.Contains(r.Stdout, "env "+cli.EnvName(f)+"\n") && !strings.Contains(r.Stdout, "env "+cli.EnvName(f)+" (comma-separated)\n") &&
					!strings.Contains(r.Stdout, "env "+cli.EnvName(f)+" or AGENTREACH_") {
					t.Errorf("help does not name %s", cli.EnvName(f))
				}
			}
		})
	}
}

// commandFlags lists the flags a command must document.
func commandFlags(t *testing.T, name string) []string {
	conn := []string{"server", "no-randomize", "user", "password", "token", "creds", "nkey", "tls-ca", "tls-cert", "tls-key", "prefix", "log-level", "timeout"}
	switch name {
	case "up":
		return []string{"data-dir", "nats-listen", "max-payload", "http", "http-tls", "http-cert", "http-key", "sync-always", "demo", "auth", "tls", "tls-verify", "heartbeat", "instances", "slow-delay",
			"strategy", "capability-strategy", "ack-timeout", "max-in-flight", "queue-wait", "relay-results", "handlers", "queue-group", "name", "prefix", "log-level",
			"retries", "write-retries", "writes", "capability-retries", "deadline", "dead-letter-retry-interval"}
	case "dispatcher":
		return append(conn, "replicas", "heartbeat", "provision", "verifier", "http", "http-tls", "http-cert", "http-key", "ack-timeout", "max-in-flight", "queue-wait", "relay-results", "handlers", "queue-group", "strategy", "capability-strategy", "name",
			"retries", "write-retries", "writes", "capability-retries", "deadline", "dead-letter-retry-interval")
	case "demo":
		return append(conn, "instances", "slow-delay", "heartbeat", "creds-dir", "js-domain")
	case "auth":
		return append(conn, "dir", "type", "out", "hosts", "resolver-dir", "once", "seed-acl", "leaf-server", "json")
	case "agents":
		return append(conn, "json", "js-domain")
	case "mcp":
		return append(conn, "url")
	case "call":
		return append(conn, "agent", "affinity-key", "header", "json", "js-domain")
	case "submit":
		return append(conn, "wait", "request-id", "header", "json", "js-domain")
	case "broadcast":
		return append(conn, "quorum", "header", "json", "js-domain")
	case "fanout":
		return append(conn, "header", "json", "js-domain")
	case "result":
		return append(conn, "wait", "json", "js-domain")
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
		{args: nil, code: cli.ExitUsage, stderr: "Commands:"},
		{args: []string{"--help"}, code: cli.ExitOK, stdout: "Commands:"},
		{args: []string{"help"}, code: cli.ExitOK, stdout: "call        call a capability"},
		{args: []string{"help", "call"}, code: cli.ExitOK, stdout: "Usage: agentreach call"},
		{args: []string{"frobnicate"}, code: cli.ExitUsage, stderr: `unknown command "frobnicate"` + "\n"},
		{args: []string{"agnets"}, code: cli.ExitUsage, stderr: `unknown command "agnets" (did you mean "agents"?)` + "\n"},
		{args: []string{"version"}, code: cli.ExitOK, stdout: "agentreach "},
		{args: []string{"--version"}, code: cli.ExitOK, stdout: cli.LongVersion() + "\n"},
		{args: []string{"-version"}, code: cli.ExitOK, stdout: cli.LongVersion() + "\n"},
		{args: []string{"bench", "--json-file"}, code: cli.ExitUsage, stderr: "flag needs an argument: -json-file"},
		{args: []string{"up", "--max-payload", "0"}, code: cli.ExitUsage, stderr: "--max-payload"},
		{args: []string{"call", "--no-such-flag"}, code: cli.ExitUsage, stderr: "no-such-flag"},
		{args: []string{"call"}, code: cli.ExitUsage, stderr: "want <capability>"},
		{args: []string{"call", "echo", "{not json"}, code: cli.ExitUsage, stderr: "payload is not valid JSON"},
		{args: []string{"call", "Not A Cap", "{}"}, code: cli.ExitUsage, stderr: "capability"},
		{args: []string{"call", "--agent", "a.b", "echo", "{}"}, code: cli.ExitUsage, stderr: "--agent"},
		{args: []string{"dispatcher", "--capability-strategy", "echo"}, code: cli.ExitUsage, stderr: "want key=value"},
		{args: []string{"dispatcher", "--capability-strategy", "echo=fastest"}, code: cli.ExitUsage, stderr: `unknown strategy "fastest"`},
		{args: []string{"dispatcher", "--replicas", "7"}, code: cli.ExitUsage, stderr: "replicas"},
		{args: []string{"up", "--nats-listen", "nowhere"}, code: cli.ExitUsage, stderr: "--nats-listen"},
		{args: []string{"up", "--instances", "-1"}, code: cli.ExitUsage, stderr: "--instances"},
		{args: []string{"up", "--prefix", "re*ch"}, code: cli.ExitUsage, stderr: "prefix"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := clitest.RunCmd(t, run, tt.args...)
			if r.Code != tt.code || !strings.Contains(r.Stdout, tt.stdout) || !strings.Contains(r.Stderr, tt.stderr) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s\nwant stdout ∋ %q, stderr ∋ %q", r.Code, tt.code, r.Stdout, r.Stderr, tt.stdout, tt.stderr)
			}
		})
	}
}
