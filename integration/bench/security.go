package bench

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
	"github.com/agent-reach/agentreach/dispatcher"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/streams"
)

// securityACL grants the security scenario's caller the echo capability.
const securityACL = `{"rules": [{"caller": "caller", "may_call": ["echo"]}]}`

// securityStack is one configuration the security scenario measures: echo
// agents behind a dispatcher, and callers building the routed request.
type securityStack struct {
	name    string
	e       *env
	echo    *echoStack
	callers []*nats.Conn
	build   func() *nats.Msg
	stop    func()
}

// runSecurity measures what security costs on the routed path: the same
// echo agents, dispatcher and 64 callers with auth, ACL checks and TLS off
// (the default stack), with auth and ACL checks on, and with TLS on too —
// each its own embedded server, measured in alternating rounds.
func runSecurity(r *run) error {
	payload := []byte(`{"text":"hello, agent"}`)
	plain, err := r.securityStack("off", false, false, false, payload)
	if err != nil {
		return err
	}
	defer plain.stop()
	authOnly, err := r.securityStack("auth", true, false, false, payload)
	if err != nil {
		return err
	}
	defer authOnly.stop()
	full, err := r.securityStack("auth_tls", true, true, false, payload)
	if err != nil {
		return err
	}
	defer full.stop()
	// The same two with the dispatcher on an in-process pipe to the
	// server, as `agentreach up` runs it: callers and agents still cross
	// TLS, the dispatcher's own hop does not.
	plainInproc, err := r.securityStack("off_inproc", false, false, true, payload)
	if err != nil {
		return err
	}
	defer plainInproc.stop()
	fullInproc, err := r.securityStack("auth_tls_inproc", true, true, true, payload)
	if err != nil {
		return err
	}
	defer fullInproc.stop()
	stacks := []*securityStack{plain, authOnly, full, plainInproc, fullInproc}

	pointDur := pick(r, 5*time.Second, 500*time.Millisecond)
	rounds := pick(r, overheadRounds, 1)
	const timeout = 2 * time.Second
	for _, s := range stacks {
		if _, err := r.closedLoop(s.callers, closedSpec{step: "warm-up " + s.name, callers: 16,
			dur: pick(r, time.Second, 200*time.Millisecond), timeout: timeout, build: s.build}); err != nil {
			return err
		}
	}
	loads := []int{1, overheadCallers}
	merged := map[string]map[int]*latency{}
	ratios := map[int][]float64{} // auth_tls / off, round by round
	for round := range rounds {
		for _, c := range loads {
			got := map[string]*latency{}
			for _, s := range stacks {
				l, err := r.closedLoop(s.callers, closedSpec{step: fmt.Sprintf("%s, %d callers, round %d of %d", s.name, c, round+1, rounds),
					callers: c, dur: pointDur / time.Duration(rounds), timeout: timeout, build: s.build})
				if err != nil {
					return err
				}
				got[s.name] = l
				if merged[s.name] == nil {
					merged[s.name] = map[int]*latency{}
				}
				if merged[s.name][c] == nil {
					merged[s.name][c] = newLatency()
				}
				merged[s.name][c].add(l)
			}
			if c == overheadCallers {
				ratios[c] = append(ratios[c], ratio(got[full.name].rps(), got[plain.name].rps()))
			} else {
				ratios[c] = append(ratios[c], ratio(float64(got[full.name].p(50)), float64(got[plain.name].p(50))))
			}
		}
	}

	var rows [][]string
	for _, s := range stacks {
		for _, c := range loads {
			l := merged[s.name][c]
			rows = append(rows, []string{s.name, fmt.Sprintf("closed, %d callers", c), f(l.rps()), us(l.p(50)), us(l.p(99)),
				fmt.Sprint(l.failed()), f(l.cores())})
			r.logf("security %s %d callers: %v", s.name, c, l)
			r.set(fmt.Sprintf("security_%s_rps_c%d", s.name, c), l.rps())
			r.set(fmt.Sprintf("security_%s_p50_us_c%d", s.name, c), float64(l.p(50).Microseconds()))
			r.set(fmt.Sprintf("security_%s_failed_c%d", s.name, c), float64(l.failed()))
		}
	}
	off64, on64 := merged[plain.name][overheadCallers], merged[full.name][overheadCallers]
	throughput := ratio(on64.rps(), off64.rps())
	r.set("security_throughput_ratio", throughput)
	r.set("security_auth_throughput_ratio", ratio(merged[authOnly.name][overheadCallers].rps(), off64.rps()))
	r.set("security_p50_ratio_c1", ratio(float64(merged[full.name][1].p(50)), float64(merged[plain.name][1].p(50))))
	inproc := ratio(merged[fullInproc.name][overheadCallers].rps(), merged[plainInproc.name][overheadCallers].rps())
	r.set("security_throughput_ratio_inproc", inproc)
	lo, hi := minMax(ratios[overheadCallers])
	r.set("security_throughput_ratio_round_min", lo)
	r.set("security_throughput_ratio_round_max", hi)
	r.set("security_rounds", float64(rounds))
	r.addTable("security: the routed path with security off, auth + ACL on, and auth + ACL + TLS on",
		[]string{"stack", "load", "req/s", "p50 µs", "p99 µs", "failed", "cores"}, rows)
	r.addTable("security: ratios (auth_tls against off)", []string{"figure", "value"}, [][]string{
		{"security_throughput_ratio (64 callers)", f(throughput)},
		{fmt.Sprintf("… round by round, lowest–highest of %d", rounds), f(lo) + "–" + f(hi)},
		{"security_auth_throughput_ratio (auth + ACL, no TLS)", f(r.rep.Figures["security_auth_throughput_ratio"])},
		{"security_p50_ratio_c1 (1 caller)", f(r.rep.Figures["security_p50_ratio_c1"])},
		{"security_throughput_ratio_inproc (dispatcher in-process, as in up)", f(inproc)},
	})
	r.note("Three stacks, each on an embedded nats-server of its own, with %d echo agents (agentkit) behind one dispatcher "+
		"and the same callers' JSON requests: off is the default (no auth, no TLS, agents answer callers directly); "+
		"auth runs the server in operator mode with one identity per connection (permissions generated from the ACL), "+
		"the callers sign every task (Reach-Signature) and the dispatcher checks it and the ACL; auth_tls adds TLS "+
		"with client certificates (mutual TLS) on every connection. Under auth agents may answer only what they "+
		"received, so results go through the dispatcher: one message hop more than off.", overheadAgents)
	r.note("off_inproc and auth_tls_inproc are off and auth_tls with the dispatcher on an in-process pipe to its server, " +
		"as `agentreach up` runs it: callers and agents still cross TLS, the dispatcher's hop does not. " +
		"security_throughput_ratio_inproc compares those two.")
	r.note("Rounds of %v, the stacks taking turns within each round, as in overhead.", pointDur/time.Duration(rounds))
	r.goal("security_throughput", fmt.Sprintf("security_throughput_ratio ≥ 0.8 (routed throughput with auth, ACL checks and TLS on "+
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

// securityStack starts one configuration: withAuth, an identity store, the
// server in operator mode, a syncer, a dispatcher that authorizes and
// callers that sign; withTLS, mutual TLS on every connection.
func (r *run) securityStack(name string, withAuth, withTLS, inProcess bool, payload []byte) (*securityStack, error) {
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
	subject := streams.Subjects{}.Task(echoCapability)
	var opts []dispatcher.Option
	if !withAuth {
		e, err := startEnv(r.ctx, topo, false)
		if err != nil {
			return fail(err)
		}
		s.e = e
		cleanup = append(cleanup, e.close)
		s.build = func() *nats.Msg { return &nats.Msg{Subject: subject, Data: payload, Header: hdr()} }
	} else {
		e, store, err := startSecureEnv(r.ctx, topo, withTLS)
		if err != nil {
			return fail(err)
		}
		s.e = e
		cleanup = append(cleanup, e.close)
		az, stopSecure, err := r.secure(e, store)
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
	agents, err := r.startAgents(s.e, []string{echoCapability}, "echo", overheadAgents, 1024, func(int) agentkit.Handler {
		return func(_ context.Context, req *agentkit.Request) (any, error) { return req.Data, nil }
	})
	if err != nil {
		return fail(err)
	}
	cleanup = append(cleanup, agents.stop)
	ds, err := r.startDispatcher(s.e, dispatcher.Config{}, inProcess, opts...)
	if err != nil {
		return fail(err)
	}
	cleanup = append(cleanup, ds.stop)
	if err := r.waitRoutable(ds, echoCapability, overheadAgents); err != nil {
		return fail(err)
	}
	if s.callers, err = s.e.connectN("caller", 4); err != nil {
		return fail(err)
	}
	return s, nil
}

// startSecureEnv starts an embedded server in operator mode on a fresh
// identity store — a dispatcher, the echo agents, a caller — with mutual
// TLS when withTLS, and provisions topo as the dispatcher. Every
// connection of the env is then one of those identities (secureIdentity).
func startSecureEnv(ctx context.Context, topo streams.Topology, withTLS bool) (*env, *auth.Store, error) {
	dir, err := os.MkdirTemp("", "agentreach-bench-")
	if err != nil {
		return nil, nil, err
	}
	e := &env{dir: dir, topo: topo}
	store, err := auth.Init(filepath.Join(dir, "auth"))
	ids := []auth.Identity{{Name: "dispatcher", Role: auth.RoleDispatcher}, {Name: "caller", Role: auth.RoleCaller}}
	for i := range overheadAgents {
		ids = append(ids, auth.Identity{Name: fmt.Sprintf("echo-%d", i), Role: auth.RoleAgent, Type: "bench", Serves: []string{echoCapability}})
	}
	for _, id := range ids {
		if err == nil {
			_, err = store.Add(id)
		}
	}
	acl, aerr := registry.ParseACL([]byte(securityACL))
	opts := serverOptions(dir)
	if err == nil {
		err = aerr
	}
	if err == nil {
		err = authserver.Configure(opts, store, filepath.Join(dir, "jwt"), acl, streams.Subjects{})
	}
	var tlsOpts []nats.Option
	if err == nil && withTLS {
		var files auth.TLSFiles
		if files, err = auth.EnsureTLS(filepath.Join(dir, "tls"), []string{"localhost", "127.0.0.1"}); err == nil {
			err = authserver.ConfigureTLS(opts, files, true)
		}
		tlsOpts = []nats.Option{nats.RootCAs(files.CA), nats.ClientCert(files.ClientCert, files.ClientKey)}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	e.identity = func(name string) ([]nats.Option, error) {
		creds := store.CredsFile(secureIdentity(name))
		if name == "sys" {
			creds = store.SystemCredsFile()
		}
		o, err := auth.ConnectOptions(creds)
		return append(o, tlsOpts...), err
	}
	e, err = startEnvIn(ctx, e, false, opts)
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
func (r *run) secure(e *env, store *auth.Store) (az *auth.Authorizer, stop func(), err error) {
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
	nc, err := e.connect("sync")
	if err != nil {
		return nil, nil, err
	}
	sys, err := e.connect("sys")
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err == nil {
		_, err = registry.PutPolicy(ctx, kv, registry.PolicyACL, []byte(securityACL))
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
	anc, err := e.connect("authorizer")
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
