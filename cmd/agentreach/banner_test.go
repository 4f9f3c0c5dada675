package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/cmd/agentreach/internal/stack"
	"github.com/agent-reach/agentreach/streams"
)

// TestBannerCommands checks every command line the banner of up, up --auth,
// up --tls and up --auth --tls prints: each one that connects names the
// server, and the CA, client certificate and credentials the stack needs,
// so that a user who copies it reaches this stack and no other.
func TestBannerCommands(t *testing.T) {
	command := regexp.MustCompile(`(agentreach [a-z]+|nats|curl) `)
	for _, c := range []struct{ auth, tls bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("auth=%t tls=%t", c.auth, c.tls), func(t *testing.T) {
			dir := t.TempDir()
			f := &stack.UpFlags{Listen: "127.0.0.1:4222", Auth: c.auth, TLS: c.tls, TLSVerify: c.tls, Demo: true}
			sec, err := f.Security(dir, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			url, http := "nats://127.0.0.1:4222", "http://127.0.0.1:8080/"
			if c.tls {
				url = "tls://127.0.0.1:4222"
			}
			httpCA := ""
			if c.tls { // and the gateway on HTTPS with the development CA
				http, httpCA = "https://127.0.0.1:8080/", dir+"/tls/ca.pem"
			}
			var out bytes.Buffer
			stack.PrintBanner(&out, stack.Banner{URL: url, DataDir: dir, Subjects: streams.Subjects{}, Dispatcher: "d1", HTTP: http,
				HTTPCA: httpCA, Demo: true, AgentIDs: []string{"echo-1"}, Sec: sec})
			var seen []string
			for _, line := range strings.Split(out.String(), "\n") {
				for _, at := range command.FindAllStringIndex(line, -1) {
					cmd := line[at[0]:]
					name := strings.Fields(cmd)[0]
					if name != "curl" { // a command in parentheses ends there
						cmd, _, _ = strings.Cut(cmd, ")")
					}
					if name == "agentreach" {
						name += " " + strings.Fields(cmd)[1]
					}
					seen = append(seen, name)
					var want []string
					switch name {
					case "agentreach auth": // reads the identity store, connects nowhere
						continue
					case "curl":
						want = []string{http}
						if httpCA != "" {
							want = append(want, "--cacert "+httpCA+" ")
						}
						if c.auth {
							want = append(want, "Authorization: Bearer $(agentreach auth token --dir "+dir+"/auth cli")
						}
					case "nats":
						want = []string{" -s " + url + " "}
						if c.tls {
							want = append(want, "--tlsca "+dir+"/tls/ca.pem", "--tlscert "+dir+"/tls/client.pem", "--tlskey "+dir+"/tls/client-key.pem")
						}
						if c.auth {
							want = append(want, "--creds "+dir+"/auth/creds/", "--inbox-prefix ")
						}
					default:
						want = []string{" --server " + url + " "}
						if c.tls {
							want = append(want, "--tls-ca "+dir+"/tls/ca.pem", "--tls-cert "+dir+"/tls/client.pem", "--tls-key "+dir+"/tls/client-key.pem")
						}
						if c.auth {
							want = append(want, "--creds "+dir+"/auth/creds/")
						}
					}
					for _, w := range want {
						if !strings.Contains(cmd+" ", w) {
							t.Errorf("%q lacks %q in:\n%s", cmd, w, out.String())
						}
					}
				}
			}
			want := []string{"agentreach call", "curl", "nats", "nats", "agentreach agents"}
			if c.auth { // no nats req: a task needs a Reach-Signature the nats CLI cannot make
				// the dashboard's token, the identities, the ACL, then the tour
				want = []string{"agentreach auth", "agentreach auth", "agentreach policy", "agentreach call", "curl", "agentreach auth", "nats", "agentreach agents"}
			}
			if strings.Join(seen, ",") != strings.Join(want, ",") {
				t.Errorf("commands %v, want %v, in:\n%s", seen, want, out.String())
			}
		})
	}
}
