package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/cli"
	"github.com/agent-reach/agentreach/cmd/agentreach/internal/clitest"
	"github.com/agent-reach/agentreach/internal/natstest"
	"github.com/agent-reach/agentreach/registry/declare"
	"github.com/agent-reach/agentreach/registry/policy"
)

// edit opens the page's editor on a new policy key (or, with kind caps, on
// a declaration's edit button), sets its text and clicks save (or
// validate).
func edit(t *testing.T, b *browser, key, text, button string) {
	t.Helper()
	b.step(t, "the page may write", 30*time.Second, chromedp.Poll[chromedp.Void](`!document.getElementById('policy-new').disabled`))
	js := fmt.Sprintf(`(() => {
		const row = document.querySelector('#policy tr[data-key=%q] button[data-edit]');
		if (row) row.click(); else { document.getElementById('policy-new-key').value = %q; document.getElementById('policy-new').click(); }
		document.getElementById('editor-status').replaceChildren();
		document.getElementById('editor-text').value = %q;
		document.getElementById(%q).click();
		return true })()`, key, key, text, "editor-"+button)
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js)); err != nil {
		t.Fatalf("edit %s from the page: %v", key, err)
	}
}

// editorSays waits for the editor's status to hold want, and returns it.
func editorSays(t *testing.T, b *browser, what, want string) string {
	t.Helper()
	b.step(t, what, 30*time.Second, chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.getElementById('editor-status').textContent.includes(%q)`, want)))
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('editor-status').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// servedBy calls echo over HTTP and returns who answered: the marker of
// the labelled agent, or "demo" for a demo echo (which returns its input).
func servedBy(t *testing.T, base, token string) (string, answer) {
	t.Helper()
	res := do(t, http.MethodPost, base+"v1/call/echo", token, `{"who":"asks"}`)
	var out struct {
		ServedBy string `json:"served_by"`
		Who      string `json:"who"`
	}
	if res.status != http.StatusOK || json.Unmarshal(res.body, &out) != nil {
		return "", res
	}
	if out.Who == "asks" {
		return "demo", res
	}
	return out.ServedBy, res
}

// TestConsoleEditsPolicyAndCatalog runs `up --demo --http-admin` with one
// more echo agent, declared with the label region=eu-west, and drives the
// page in headless Chromium: an invalid policy edit shows the field's
// error and changes nothing; a valid one (capability.echo requires the
// label) is saved, recorded by http-admin, and every call afterwards is
// served by the labelled agent; the agent's declaration, edited from the
// page to another region, leaves echo no instance (NO_AGENT); a taxonomy
// saved from the page makes the catalog warn of the capabilities outside
// it; an invalid declaration is refused naming its field.
func TestConsoleEditsPolicyAndCatalog(t *testing.T) {
	chromium(t)
	before := clitest.Goroutines()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	u := startUp(t, "--nats-listen", listen, "--data-dir", t.TempDir(), "--demo", "--http", httpAddr, "--http-admin")
	clitest.WaitOutput(t, u.stdout, "Agent-Reach is up")
	base := "http://" + httpAddr + "/"

	nc, err := nats.Connect("nats://" + listen)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	eu, err := agentkit.New(nc, agentkit.Config{ID: "echo-eu-1", Type: "echo-eu", Declaration: &declare.Declaration{
		Type: "echo-eu", Capabilities: []declare.DeclaredCapability{{Name: "echo", Description: "echoes from eu-west",
			InputSchema: json.RawMessage(`{"type": "object"}`)}},
		Labels: map[string][]string{"region": {"eu-west"}}}}, agentkit.WithoutSignals())
	if err != nil {
		t.Fatal(err)
	}
	if err := eu.Handle("echo", func(context.Context, *agentkit.Request) (any, error) {
		return map[string]string{"served_by": "echo-eu-1"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := eu.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = eu.Drain(ctx)
	}()
	// Before any policy, a demo echo serves some calls (the control).
	natstest.WaitFor(t, 30*time.Second, func() error {
		if who, res := servedBy(t, base, ""); who != "demo" {
			return fmt.Errorf("echo served by %q (%d %s), want a demo echo among the three", who, res.status, res.body)
		}
		return nil
	})

	b := openBrowser(t)
	defer b.close()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	b.step(t, "the catalog lists echo with its three instances and its schema", 30*time.Second,
		chromedp.Poll[chromedp.Void](`(r => !!r && r.textContent.includes('echo-eu-1') && r.textContent.includes('echo-eu') &&
			!!r.querySelector('details'))(document.querySelector('#catalog .captype[data-type="echo"] tr[data-capability="echo"]'))`))

	// An invalid edit: the field's error, and nothing stored.
	edit(t, b, "capability.echo", `{"retries": "many"}`, "save")
	got := editorSays(t, b, "an invalid edit shows its error", "not saved")
	if !strings.Contains(got, "BAD_REQUEST (400)") || !strings.Contains(got, "retries") {
		t.Errorf("the invalid edit shows %q, want BAD_REQUEST naming retries", got)
	}
	if res := do(t, http.MethodGet, base+"v1/console/policy", "", ""); strings.Contains(string(res.body), `"capability.echo"`) {
		t.Errorf("the refused edit was stored: %s", res.body)
	}
	// Validate only: valid, nothing stored.
	policy := `{"require": {"labels": {"region": "eu-west"}}}`
	edit(t, b, "capability.echo", policy, "validate")
	editorSays(t, b, "the policy validates", "valid: capability.echo")
	if res := do(t, http.MethodGet, base+"v1/console/policy", "", ""); strings.Contains(string(res.body), `"capability.echo"`) {
		t.Errorf("a validation stored the value: %s", res.body)
	}
	// The edit, saved: every call afterwards goes to the labelled agent.
	edit(t, b, "capability.echo", policy, "save")
	got = editorSays(t, b, "the policy is saved", "saved capability.echo")
	if !strings.Contains(got, "by http-admin") {
		t.Errorf("the save reads %q, want it by http-admin", got)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		for i := range 20 {
			if who, res := servedBy(t, base, ""); who != "echo-eu-1" {
				return fmt.Errorf("call %d after the policy: served by %q (%d %s), want echo-eu-1", i, who, res.status, res.body)
			}
		}
		return nil
	})
	b.step(t, "the change is listed by who made it", 30*time.Second,
		chromedp.Poll[chromedp.Void](`[...document.querySelectorAll('#actions tr')].some(r => r.textContent.includes('http-admin') && r.textContent.includes('capability.echo'))`))

	// The declaration, edited from the page: echo-eu moves to us-east, so
	// no instance meets capability.echo's requirement any more.
	b.step(t, "the declaration of echo-eu is listed", 30*time.Second,
		chromedp.Poll[chromedp.Void](`!!document.querySelector('#declarations tr[data-type="echo-eu"] button[data-edit]:not([disabled])')`))
	moved := `{"type": "echo-eu", "capabilities": [{"name": "echo", "description": "echoes from us-east", "input_schema": {"type": "object"}}], "labels": {"region": ["us-east"]}}`
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		document.querySelector('#declarations tr[data-type="echo-eu"] button[data-edit]').click();
		document.getElementById('editor-status').replaceChildren();
		document.getElementById('editor-text').value = %q;
		document.getElementById('editor-save').click();
		return true })()`, moved))); err != nil {
		t.Fatal(err)
	}
	editorSays(t, b, "the declaration is saved", "saved echo-eu")
	natstest.WaitFor(t, 30*time.Second, func() error {
		if res := do(t, http.MethodPost, base+"v1/call/echo", "", `{"who":"asks"}`); res.status != http.StatusNotFound || !strings.Contains(string(res.body), "NO_AGENT") {
			return fmt.Errorf("echo after the declaration moved: %d %s, want 404 NO_AGENT", res.status, res.body)
		}
		return nil
	})

	// The taxonomy, saved from the page: the catalog warns of slow and
	// math.add (their types are not official), not of echo.
	edit(t, b, "taxonomy", `{"types": [{"name": "echo", "description": "answers what it is given"}, {"name": "story"}]}`, "save")
	got = editorSays(t, b, "the taxonomy is saved with its warnings", "saved taxonomy")
	if !strings.Contains(got, `slow: its type "slow" is not in the taxonomy`) {
		t.Errorf("saving the taxonomy says %q, want a warning about slow", got)
	}
	b.step(t, "the catalog warns of the capabilities outside the taxonomy", 30*time.Second,
		chromedp.Poll[chromedp.Void](`!!document.querySelector('#catalog-warnings li[data-kind="outside_taxonomy"][data-capability="slow"]') &&
			document.querySelector('#catalog .captype[data-type="slow"] h4').textContent.includes('outside the taxonomy') &&
			!document.querySelector('#catalog-warnings li[data-capability="echo"]')`))
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(document.getElementById('govern').scrollIntoView(), true)`)); err != nil {
		t.Fatal(err)
	}
	keep(t, b, "policy.png", chromedp.Screenshot(chromedp.Search("#govern")))

	// A declaration: an invalid one names its field and is not stored.
	res := do(t, http.MethodPost, base+"v1/console/caps/echo-eu", "", `{"value": "type: echo-eu\ncapabilities:\n  - name: echo\n    mode: delete\n"}`)
	if res.status != http.StatusBadRequest || !strings.Contains(string(res.body), "capabilities[0].mode") {
		t.Errorf("an invalid declaration: %d %s, want 400 naming capabilities[0].mode", res.status, res.body)
	}
	res = do(t, http.MethodPost, base+"v1/console/caps/echo-eu", "", `{"value": "type: other\ncapabilities: [{name: echo}]"}`)
	if res.status != http.StatusBadRequest || !strings.Contains(string(res.body), "type:") {
		t.Errorf("a declaration of another type: %d %s, want 400 naming type", res.status, res.body)
	}
	if res := do(t, http.MethodGet, base+"v1/console/catalog", "", ""); !strings.Contains(string(res.body), "echoes from us-east") {
		t.Errorf("after refused writes the declaration changed: %s", res.body)
	}
	// A write at the revision read succeeds once; again at the same
	// revision it is a conflict, and changes nothing.
	var listed struct {
		Keys []struct {
			Key      string          `json:"key"`
			Revision uint64          `json:"revision"`
			Value    json.RawMessage `json:"value"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(do(t, http.MethodGet, base+"v1/console/policy", "", "").body, &listed); err != nil || len(listed.Keys) == 0 {
		t.Fatalf("policy listing: %v", err)
	}
	read := listed.Keys[0]
	write := fmt.Sprintf(`{"value": %q, "revision": %d}`, string(read.Value), read.Revision)
	if res := do(t, http.MethodPost, base+"v1/console/policy/"+read.Key, "", write); res.status != http.StatusOK {
		t.Errorf("a write at the revision read: %d %s, want 200", res.status, res.body)
	}
	res = do(t, http.MethodPost, base+"v1/console/policy/"+read.Key, "", write)
	if res.status != http.StatusConflict || !strings.Contains(string(res.body), "CONFLICT") {
		t.Errorf("a write at a stale revision: %d %s, want 409 CONFLICT", res.status, res.body)
	}
	// The identity directory is not the console's.
	if res := do(t, http.MethodPost, base+"v1/console/policy/identity.x", "", `{"value": "{}"}`); res.status != http.StatusForbidden {
		t.Errorf("a write of an identity entry: %d %s, want 403", res.status, res.body)
	}

	b.close()
	if err := eu.Drain(context.Background()); err != nil {
		t.Error(err)
	}
	nc.Close()
	if code := u.Stop(t); code != cli.ExitOK {
		t.Fatalf("up exited %d; stderr:\n%s", code, u.stderr.String())
	}
	clitest.CheckNoLeaks(t, before)
}

// TestConsolePolicyUnderAuth runs `up --auth --demo`: opened with an
// agent's token the page shows the policy as an operator's only and every
// edit button off, and a change sent anyway is 403 and leaves the ACL as
// it was; the control: the operator (the dispatcher identity) changes the
// ACL from the page, the change is recorded by it, and the caller's call of
// echo, allowed before, is refused after.
func TestConsolePolicyUnderAuth(t *testing.T) {
	chromium(t)
	before := clitest.Goroutines()
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	u := startUp(t, "--nats-listen", listen, "--data-dir", dir, "--auth", "--demo", "--http", httpAddr)
	clitest.WaitOutput(t, u.stdout, "Agent-Reach is up")
	base := "http://" + httpAddr + "/"
	token := func(name string) string {
		return strings.TrimSpace(clitest.RunCmd(t, RunAuth, "--dir", filepath.Join(dir, "auth"), "token", name).Stdout)
	}
	var agent string
	for _, id := range bannerAgents(t, u.stdout.String()) {
		if strings.HasPrefix(id, "echo-") {
			agent = id
		}
	}
	callerToken, agentToken, operatorToken := token(UpCallerIdentity), token(agent), token(UpDispatcherIdentity)
	if res := do(t, http.MethodPost, base+"v1/call/echo", callerToken, `{"a":1}`); res.status != http.StatusOK {
		t.Fatalf("the caller's echo before the change: %d %s", res.status, res.body)
	}
	aclRevision := func() uint64 {
		t.Helper()
		res := do(t, http.MethodGet, base+"v1/console/policy", operatorToken, "")
		var p struct {
			Keys []struct {
				Key      string `json:"key"`
				Revision uint64 `json:"revision"`
			} `json:"keys"`
		}
		if err := json.Unmarshal(res.body, &p); err != nil {
			t.Fatalf("policy: %d %s", res.status, res.body)
		}
		for _, k := range p.Keys {
			if k.Key == policy.KeyACL {
				return k.Revision
			}
		}
		t.Fatalf("no acl in %s", res.body)
		return 0
	}
	rev := aclRevision()

	b := openBrowser(t)
	defer b.close()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(base+"#token="+agentToken), chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	b.step(t, "to an agent's identity the policy is an operator's and the edits are off", 30*time.Second,
		chromedp.Poll[chromedp.Void](`document.getElementById('policy-status').textContent.includes('only an operator identity') &&
			document.getElementById('policy-new').disabled && !!document.querySelector('#catalog .captype[data-type="echo"]')`))
	screenshot(t, b, "policy-refused.png")
	// The attack: the change sent anyway.
	openACL := `{"value": "{\"rules\": [{\"caller\": \"*\", \"may_call\": [\">\"]}]}"}`
	if res := do(t, http.MethodPost, base+"v1/console/policy/acl", agentToken, openACL); res.status != http.StatusForbidden ||
		!strings.Contains(string(res.body), "only an operator identity") {
		t.Errorf("an agent's ACL change: %d %s, want 403", res.status, res.body)
	}
	if res := do(t, http.MethodPost, base+"v1/console/caps/echo", agentToken, `{"value": "{\"type\": \"echo\", \"capabilities\": [{\"name\": \"echo\"}]}"}`); res.status != http.StatusForbidden {
		t.Errorf("an agent's declaration change: %d %s, want 403", res.status, res.body)
	}
	if res := do(t, http.MethodPost, base+"v1/console/policy/acl", "", openACL); res.status != http.StatusUnauthorized {
		t.Errorf("an ACL change without a token: %d %s, want 401", res.status, res.body)
	}
	if res := do(t, http.MethodGet, base+"v1/console/policy", agentToken, ""); res.status != http.StatusForbidden {
		t.Errorf("an agent reads the policy: %d %s, want 403", res.status, res.body)
	}
	if got := aclRevision(); got != rev {
		t.Errorf("after refused changes the acl is at revision %d, was %d", got, rev)
	}

	// The control: the operator narrows the ACL from the page.
	if err := chromedp.Do(b.ctx, chromedp.Navigate(base+"#token="+operatorToken), chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	b.step(t, "the operator sees the acl", 30*time.Second, chromedp.Poll[chromedp.Void](`!!document.querySelector('#policy tr[data-key="acl"] button[data-edit]:not([disabled])')`))
	edit(t, b, "acl", `{"rules": [{"caller": "*", "may_call": ["math.>", "slow"]}]}`, "save")
	if got := editorSays(t, b, "the operator saves the ACL", "saved acl"); !strings.Contains(got, "by "+UpDispatcherIdentity) {
		t.Errorf("the save reads %q, want it by %s", got, UpDispatcherIdentity)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if res := do(t, http.MethodPost, base+"v1/call/echo", callerToken, `{"a":1}`); res.status != http.StatusForbidden {
			return fmt.Errorf("the caller's echo after the ACL change: %d %s, want 403", res.status, res.body)
		}
		return nil
	})
	// math.add is still allowed (its agent's connection may be re-made
	// with the new permissions meanwhile).
	natstest.WaitFor(t, 30*time.Second, func() error {
		if res := do(t, http.MethodPost, base+"v1/call/math.add", callerToken, `{"a":1,"b":2}`); res.status != http.StatusOK {
			return fmt.Errorf("the caller's math.add, still allowed: %d %s", res.status, res.body)
		}
		return nil
	})
	b.step(t, "the ACL change is listed by the operator", 30*time.Second,
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`[...document.querySelectorAll('#actions tr')].some(r => r.textContent.includes(%q) && r.textContent.includes('acl @'))`, UpDispatcherIdentity)))
	b.close()
	if code := u.Stop(t); code != cli.ExitOK {
		t.Fatalf("up exited %d; stderr:\n%s", code, u.stderr.String())
	}
	clitest.CheckNoLeaks(t, before)
}
