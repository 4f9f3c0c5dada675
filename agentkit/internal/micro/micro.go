// Package micro makes an agent visible to the NATS micro protocol's
// tools (`nats micro ls`, `info`, `stats`; docs/protocol.md, NATS micro):
// it answers $SRV.PING, $SRV.INFO and $SRV.STATS, and their .<name> and
// .<name>.<id> forms, for one agent instance. The service name is the
// agent type and each endpoint one capability, with '.' written as '_'
// (micro names allow only [A-Za-z0-9_-]); every endpoint's subject is the
// instance's delivery subject and its metadata {"capability": <name>}.
// The statistics are the agent's own counters (Count): no subscription
// per capability, five for the whole service.
package micro

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/registry/declare"
)

// Config describes the service.
type Config struct {
	Type, ID, Version string
	// Subject is the instance's delivery subject (reach.agent.<id>).
	Subject      string
	Capabilities []string
	// Declaration, when set, gives the description.
	Declaration *declare.Declaration
}

// Service answers the micro protocol's requests for one agent. Count is
// safe for concurrent use; Start and Stop are called by the agent's owner.
type Service struct {
	cfg         Config
	description string
	name        string
	started     time.Time
	stats       map[string]*counter
	subs        []*nats.Subscription
}

// counter is one capability's counts.
type counter struct {
	requests, errors, nanos atomic.Int64
	lastError               atomic.Pointer[string]
}

// semver is what the micro protocol's tools accept as a version (the
// nats CLI refuses an answer with another).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Name is the micro name of an agent type or capability: '.' as '_'.
func Name(s string) string { return strings.ReplaceAll(s, ".", "_") }

// New returns the service of cfg, not yet answering.
func New(cfg Config) *Service {
	s := &Service{cfg: cfg, name: Name(cfg.Type), started: time.Now().UTC(), stats: make(map[string]*counter),
		description: "Agent-Reach agent type " + cfg.Type}
	if cfg.Declaration != nil && cfg.Declaration.Description != "" {
		s.description = cfg.Declaration.Description
	}
	for _, c := range cfg.Capabilities {
		s.stats[c] = &counter{}
	}
	return s
}

// Count adds one request of capability that took took, failed with
// errText when it is not "".
func (s *Service) Count(capability string, took time.Duration, errText string) {
	if s == nil {
		return
	}
	c := s.stats[capability]
	if c == nil {
		return
	}
	c.requests.Add(1)
	c.nanos.Add(int64(took))
	if errText != "" {
		c.errors.Add(1)
		c.lastError.Store(&errText)
	}
}

// Start subscribes on nc to $SRV.PING, $SRV.INFO, $SRV.STATS,
// $SRV.*.<name> and $SRV.*.<name>.<id> (the verbs spelled out: that is
// what an agent's credentials allow, docs/security.md). When it cannot,
// it logs why and answers nothing: the agent serves on, unlisted. A nil
// Service does nothing.
func (s *Service) Start(nc *nats.Conn, log zerolog.Logger) {
	if s == nil {
		return
	}
	srv := micro.APIPrefix + ".*." + s.name
	for _, subject := range []string{"$SRV.PING", "$SRV.INFO", "$SRV.STATS", srv, srv + "." + s.cfg.ID} {
		sub, err := nc.Subscribe(subject, s.answer)
		if err != nil {
			s.Stop()
			log.Warn().Err(err).Msg("not answering the NATS micro protocol ($SRV)")
			return
		}
		s.subs = append(s.subs, sub)
	}
}

// Stop ends the subscriptions. A nil Service does nothing, in Count too.
func (s *Service) Stop() {
	if s == nil {
		return
	}
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.subs = nil
}

// answer answers one request of the micro protocol; other verbs, and
// requests without a reply subject, get nothing.
func (s *Service) answer(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	verb, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, micro.APIPrefix+"."), ".")
	v, err := s.Response(verb)
	if err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err == nil {
		_ = m.Respond(b)
	}
}

// errVerb is the answer to a verb the protocol does not have.
var errVerb = errors.New("micro: unknown verb")

// Response returns the answer to verb: PING, INFO or STATS.
func (s *Service) Response(verb string) (any, error) {
	id := micro.ServiceIdentity{Name: s.name, ID: s.cfg.ID, Version: s.cfg.Version, Metadata: map[string]string{"type": s.cfg.Type}}
	if !semver.MatchString(id.Version) { // "dev": 0.0.0, the version as given in the metadata
		id.Version, id.Metadata["version"] = "0.0.0", s.cfg.Version
	}
	switch verb {
	case "PING":
		return micro.Ping{ServiceIdentity: id, Type: micro.PingResponseType}, nil
	case "INFO":
		info := micro.Info{ServiceIdentity: id, Type: micro.InfoResponseType, Description: s.description, Endpoints: []micro.EndpointInfo{}}
		for _, c := range s.cfg.Capabilities {
			info.Endpoints = append(info.Endpoints, micro.EndpointInfo{Name: Name(c), Subject: s.cfg.Subject,
				Metadata: map[string]string{"capability": c}})
		}
		return info, nil
	case "STATS":
		st := micro.Stats{ServiceIdentity: id, Type: micro.StatsResponseType, Started: s.started, Endpoints: []*micro.EndpointStats{}}
		for _, c := range s.cfg.Capabilities {
			n := s.stats[c]
			es := &micro.EndpointStats{Name: Name(c), Subject: s.cfg.Subject, NumRequests: int(n.requests.Load()),
				NumErrors: int(n.errors.Load()), ProcessingTime: time.Duration(n.nanos.Load())}
			if es.NumRequests > 0 {
				es.AverageProcessingTime = es.ProcessingTime / time.Duration(es.NumRequests)
			}
			if e := n.lastError.Load(); e != nil {
				es.LastError = *e
			}
			st.Endpoints = append(st.Endpoints, es)
		}
		return st, nil
	}
	return nil, errVerb
}
