package routing

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-reach/agentreach/agentkit"
	"github.com/agent-reach/agentreach/auth"
	"github.com/agent-reach/agentreach/auth/authserver"
	"github.com/agent-reach/agentreach/auth/devtls"
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/dispatcher/config"
	"github.com/agent-reach/agentreach/integration/bench/harness"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// securityACL grants the security scenario's caller the echo capability.
const securityACL = `{"rules": [{"caller": "caller", "may_call": ["echo"]}]}`

// securityStack is one configuration the security scenario measures: echo
// agents behind a dispatcher, and callers building the routed request.
type securityStack struct {
	name    string
	e       *harness.Env
	echo    *harness.EchoStack
	callers []*nats.Conn
	build   func() *nats.Msg
	stop    func()
}

// runSecurity measures what security costs on the routed path: the same
// echo agents, dispatcher and 64 callers with auth, ACL checks and TLS off
// (the default stack), with auth and ACL checks on, and with TLS on too —
// each its own embedded server, measured in alternating rounds.
func Security(r *harness.Run) error {
	payload := []byte(`{"text":"hello, agent"}`)
	plain, err := startSecurityStack(r, "off", false, false, false, payload)
	if err != nil {
		return err
	}
	defer plain.stop()
	authOnly, err := startSecurityStack(r, "auth", true, false, false, payload)
	if err != nil {
		return err
	}
	defer authOnly.stop()
	full, err := startSecurityStack(r, "auth_tls", true, true, false, payload)
	if err != nil {
		return err
	}
	defer full.stop()
	// The same two with the dispatcher on an in-process pipe to the
	// server, as `agentreach up` runs it: callers and agents still cross
	// TLS, the dispatcher's own hop does not.
	plainInproc, err := startSecurityStack(r, "off_inproc", false, false, true, payload)
	if err != nil {
		return err
	}
	defer plainInproc.stop()
	fullInproc, err := startSecurityStack(r, "auth_tls_inproc", true, true, true, payload)
	if err != nil {
		return err
	}
	defer fullInproc.stop()
	stacks := []*securityStack{plain, authOnly, full, plainInproc, fullInproc}

	pointDur := harness.Pick(r, 5*time.Second, 500*time.Millisecond)
	rounds := harness.Pick(r, harness.OverheadRounds, 1)
	const timeout = 2 * time.Second
	for _, s := range stacks {
		if _, err := r.ClosedLoop(s.callers, harness.ClosedSpec{Step: "warm-up " + s.name, Callers: 16,
			Dur: harness.Pick(r, time.Second, 200*time.Millisecond), Timeout: timeout, Build: s.build}); err != nil {
			return err
		}
	}
	loads := []int{1, harness.OverheadCallers}
	merged := map[string]map[int]*harness.Latency{}
	ratios := map[int][]float64{} // auth_tls / off, round by round
	for round := range rounds {
		for _, c := range loads {
			got := map[string]*harness.Latency{}
			for _, s := range stacks {
				l, err := r.ClosedLoop(s.callers, harness.ClosedSpec{Step: fmt.Sprintf("%s, %d callers, round %d of %d", s.name, c, round+1, rounds),
					Callers: c, Dur: pointDur / time.Duration(rounds), Timeout: timeout, Build: s.build})
				if err != nil {
					return err
				}
				got[s.name] = l
				if merged[s.name] == nil {
					merged[s.name] = map[int]*harness.Latency{}
				}
				if merged[s.name][c] == nil {
					merged[s.name][c] = harness.NewLatency()
				}
				merged[s.name][c].Add(l)
			}
			if c == harness.OverheadCallers {
				ratios[c] = append(ratios[c], harness.Ratio(got[full.name].RPS(), got[plain.name].RPS()))
			} else {
				ratios[c] = append(ratios[c], harness.Ratio(float64(got[full.name].P(50)), float64(got[plain.name].P(50))))
			}
		}
	}

	var rows [][]string
	for _, s := range stacks {
		for _, c := range loads {
			l := merged[s.name][c]
			rows = append(rows, []string{s.name, fmt.Sprintf("closed, %d callers", c), harness.Cell(l.RPS()), harness.MicrosCell(l.P(50)), harness.MicrosCell(l.P(99)),
				fmt.Sprint(l.Failed()), harness.Cell(l.Cores())})
			r.Logf("security %s %d callers: %v", s.name, c, l)
			r.Set(fmt.Sprintf("security_%s_rps_c%d", s.name, c), l.RPS())
			r.Set(fmt.Sprintf("security_%s_p50_us_c%d", s.name, c), float64(l.P(50).Microseconds()))
			r.Set(fmt.Sprintf("security_%s_failed_c%d", s.name, c), float64(l.Failed()))
		}
	}
	off64, on64 := merged[plain.name][harness.OverheadCallers], merged[full.name][harness.OverheadCallers]
	throughput := harness.Ratio(on64.RPS(), off64.RPS())
	r.Set("security_throughput_ratio", throughput)
	r.Set("security_auth_throughput_ratio", harness.Ratio(merged[authOnly.name][harness.OverheadCallers].RPS(), off64.RPS()))
	r.Set("security_p50_ratio_c1", harness.Ratio(float64(merged[full.name][1].P(50)), float64(merged[plain.name][1].P(50))))
	inproc := harness.Ratio(merged[fullInproc.name][harness.OverheadCallers].RPS(), merged[plainInproc.name][harness.OverheadCallers].RPS())
	r.Set("security_throughput_ratio_inproc", inproc)
	lo, hi := minMax(ratios[harness.OverheadCallers])
	r.Set("security_throughput_ratio_round_min", lo)
	r.Set("security_throughput_ratio_round_max", hi)
	r.Set("security_rounds", float64(rounds))
	r.AddTable("security: the routed path with security off, auth + ACL on, and auth + ACL + TLS on",
		[]string{"stack", "load", "req/s", "p50 µs", "p99 µs", "failed", "cores"}, rows)
	r.AddTable("security: ratios (auth_tls against off)", []string{"figure", "value"}, [][]string{
		{"security_throughput_ratio (64 callers)", harness.Cell(throughput)},
		{fmt.Sprintf("… round by round, lowest–highest of %d", rounds), harness.Cell(lo) + "–" + harness.Cell(hi)},
		{"security_auth_throughput_ratio (auth + ACL, no TLS)", harness.Cell(r.Rep.Figures["security_auth_throughput_ratio"])},
		{"security_p50_ratio_c1 (1 caller)", harness.Cell(r.Rep.Figures["security_p50_ratio_c1"])},
		{"security_throughput_ratio_inproc (dispatcher in-process, as in up)", harness.Cell(inproc)},
	})
	r.Note("Three stacks, each on an embedded nats-server of its own, with %d echo agents (agentkit) behind one dispatcher "+
		"and the same callers' JSON requests: off is the default (no auth, no TLS, agents answer callers directly); "+
		"auth runs the server in operator mode with one identity per connection (permissions generated from the ACL), "+
		"the callers sign every task (Reach-Signature) and the dispatcher checks it and the ACL; auth_tls adds TLS "+
		"with client certificates (mutual TLS) on every connection. Under auth agents may answer only what they "+
		"received, so results go through the dispatcher: one message hop more than off.", harness.OverheadAgents)
	r.Note("off_inproc and auth_tls_inproc are off and auth_tls with the dispatcher on an in-process pipe to its server, " +
		"as `agentreach up` runs it: callers and agents still cross TLS, the dispatcher's hop does not. " +
		"security_throughput_ratio_inproc compares those two.")
	r.Note("Rounds of %v, the stacks taking turns within each round, as in overhead.", pointDur/time.Duration(rounds))
	r.Goal("security_throughput", fmt.Sprintf("security_throughput_ratio ≥ 0.8 (routed throughput with auth, ACL checks and TLS on "+
		"against off, 64 callers): %.2f", throughput), throughput >= 0.8)
	return nil
}

// minMax returns the smallest and largest of vs.
func minMax(vs []float64) (lo, hi float64) {
	for i, v := range vs {
		if i == 0 || v < lo {
			lo = v
		}
		if i == 0 || v > hi {
			hi = v
		}
	}
	return lo, hi
}

// startSecurityStack starts one configuration: withAuth, an identity store, the
// server in operator mode, a syncer, a dispatcher that authorizes and
// callers that sign; withTLS, mutual TLS on every connection.
func startSecurityStack(r *harness.Run, name string, withAuth, withTLS, inProcess bool, payload []byte) (*securityStack, error) {
	s := &securityStack{name: name}
	var cleanup []func()
	s.stop = func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	fail := func(err error) (*securityStack, error) {
		s.stop()
		return nil, fmt.Errorf("security %s: %w", name, err)
	}
	topo := streams.Topology{Memory: true}
	hdr := func() nats.Header {
		return nats.Header{streams.HeaderContentType: []string{streams.ContentTypeJSON}, streams.HeaderRequestID: []string{streams.NewRequestID()}}
	}
	subject := streams.Subjects{}.Task(harness.EchoCapability)
	var opts []dispatcher.Option
	if !withAuth {
		e, err := harness.StartEnv(r.Ctx, topo, false)
		if err != nil {
			return fail(err)
		}
		s.e = e
		cleanup = append(cleanup, e.Close)
		s.build = func() *nats.Msg { return &nats.Msg{Subject: subject, Data: payload, Header: hdr()} }
	} else {
		e, store, err := startSecureEnv(r.Ctx, topo, withTLS)
		if err != nil {
			return fail(err)
		}
		s.e = e
		cleanup = append(cleanup, e.Close)
		az, stopSecure, err := secure(r, e, store)
		if err != nil {
			return fail(err)
		}
		cleanup = append(cleanup, stopSecure)
		opts = append(opts, dispatcher.WithAuthorizer(az))
		signer, err := auth.LoadSigner(store.CredsFile("caller"))
		if err != nil {
			return fail(err)
		}
		s.build = func() *nats.Msg {
			m := &nats.Msg{Subject: subject, Data: payload, Header: hdr()}
			signer.Sign(m, time.Now())
			return m
		}
	}
	agents, err := r.StartAgents(s.e, []string{harness.EchoCapability}, "echo", harness.OverheadAgents, 1024, func(int) agentkit.Handler {
		return func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }
	})
	if err != nil {
		return fail(err)
	}
	cleanup = append(cleanup, agents.Stop)
	ds, err := r.StartDispatcher(s.e, config.Config{}, inProcess, opts...)
	if err != nil {
		return fail(err)
	}
	cleanup = append(cleanup, ds.Stop)
	if err := r.WaitRoutable(ds, harness.EchoCapability, harness.OverheadAgents); err != nil {
		return fail(err)
	}
	if s.callers, err = s.e.ConnectN("caller", 4); err != nil {
		return fail(err)
	}
	return s, nil
}

// startSecureEnv starts an embedded server in operator mode on a fresh
// identity store — a dispatcher, the echo agents, a caller — with mutual
// TLS when withTLS, and provisions topo as the dispatcher. Every
// connection of the env is then one of those identities (secureIdentity).
func startSecureEnv(ctx context.Context, topo streams.Topology, withTLS bool) (*harness.Env, *auth.Store, error) {
	dir, err := os.MkdirTemp("", "agentreach-bench-")
	if err != nil {
		return nil, nil, err
	}
	e := &harness.Env{Dir: dir, Topo: topo}
	store, err := auth.Init(filepath.Join(dir, "auth"))
	ids := []auth.Identity{{Name: "dispatcher", Role: auth.RoleDispatcher}, {Name: "caller", Role: auth.RoleCaller}}
	for i := range harness.OverheadAgents {
		ids = append(ids, auth.Identity{Name: fmt.Sprintf("echo-%d", i), Role: auth.RoleAgent, Type: "bench", Serves: []string{harness.EchoCapability}})
	}
	for _, id := range ids {
		if err == nil {
			_, err = store.Add(id)
		}
	}
	acl, aerr := policy.ParseACL([]byte(securityACL))
	opts := harness.ServerOptions(dir)
	if err == nil {
		err = aerr
	}
	if err == nil {
		err = authserver.Configure(opts, store, filepath.Join(dir, "jwt"), acl, streams.Subjects{})
	}
	var tlsOpts []nats.Option
	if err == nil && withTLS {
		var files devtls.TLSFiles
		if files, err = devtls.EnsureTLS(filepath.Join(dir, "tls"), []string{"localhost", "127.0.0.1"}); err == nil {
			err = authserver.ConfigureTLS(opts, files, true)
		}
		tlsOpts = []nats.Option{nats.RootCAs(files.CA), nats.ClientCert(files.ClientCert, files.ClientKey)}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	e.Identity = func(name string) ([]nats.Option, error) {
		creds := store.CredsFile(secureIdentity(name))
		if name == "sys" {
			creds = store.SystemCredsFile()
		}
		o, err := auth.ConnectOptions(creds)
		return append(o, tlsOpts...), err
	}
	e, err = harness.StartEnvIn(ctx, e, false, opts)
	return e, store, err
}

// secureIdentity names the identity of the security env's connection
// called name: an agent's work and heartbeat connections are the agent
// ("echo-0", "echo-0-hb"), callers are "caller", the rest the dispatcher.
func secureIdentity(name string) string {
	switch id := strings.TrimSuffix(name, "-hb"); {
	case strings.HasPrefix(id, "echo-"):
		return id
	case strings.HasPrefix(id, "caller"):
		return "caller"
	}
	return "dispatcher"
}

// secure writes the ACL, starts the syncer (which writes the identity
// directory) and the dispatcher's authorizer; stop stops both.
func secure(r *harness.Run, e *harness.Env, store *auth.Store) (az *auth.Authorizer, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	nc, err := e.Connect("sync")
	if err != nil {
		return nil, nil, err
	}
	sys, err := e.Connect("sys")
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(r.Ctx, 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err == nil {
		_, err = registry.PutPolicy(ctx, kv, policy.KeyACL, []byte(securityACL))
	}
	if err != nil {
		return nil, nil, err
	}
	syncer, err := auth.NewSyncer(ctx, store, sys, nc, auth.SyncConfig{})
	if err == nil {
		err = syncer.Start(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, syncer.Close)
	verifier, err := auth.LoadVerifier(store.VerifierFile())
	if err != nil {
		return nil, nil, err
	}
	anc, err := e.Connect("authorizer")
	if err != nil {
		return nil, nil, err
	}
	ajs, err := jetstream.New(anc)
	if err != nil {
		return nil, nil, err
	}
	if az, err = auth.NewAuthorizer(ctx, ajs, verifier, auth.AuthorizerConfig{}); err == nil {
		err = az.Start(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, az.Close)
	return az, stop, nil
}
