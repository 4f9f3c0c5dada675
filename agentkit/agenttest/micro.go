package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// checkMicro: the NATS micro protocol is optional. An agent that answers
// $SRV.INFO.conformance.<id> (nobody answering passes) answers as
// docs/protocol.md says: service "conformance", its instance id, one
// endpoint per capability ('.' as '_') on its delivery subject with
// metadata {"capability": <name>}; and its $SRV.STATS has counted the
// conformance.echo tasks of the rules before.
func checkMicro(ctx context.Context, s *suite) error {
	id := s.env.AgentID
	ask := func(verb string, v any) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, answerWithin)
		defer cancel()
		m, err := s.nc.RequestWithContext(rctx, "$SRV."+verb+"."+agentType+"."+id, nil)
		if errors.Is(err, nats.ErrNoResponders) {
			return false, nil
		}
		if err != nil {
			return true, err
		}
		return true, json.Unmarshal(m.Data, v)
	}
	var info micro.Info
	answered, err := ask("INFO", &info)
	if !answered {
		s.log.Info().Msg("rule micro: the agent does not answer the NATS micro protocol (optional)")
		return nil
	}
	var p problems
	if err != nil {
		return errors.New("$SRV.INFO: " + err.Error())
	}
	if info.Type != micro.InfoResponseType || info.Name != agentType || info.ID != id {
		p.add("$SRV.INFO answered type %q name %q id %q, want %q, %q, %q", info.Type, info.Name, info.ID, micro.InfoResponseType, agentType, id)
	}
	want := map[string]string{}
	for _, c := range capabilities {
		want[strings.ReplaceAll(c, ".", "_")] = c
	}
	for _, e := range info.Endpoints {
		if want[e.Name] == "" || e.Metadata["capability"] != want[e.Name] || e.Subject != s.env.Subjects.Agent(id) {
			p.add("$SRV.INFO endpoint %+v: want one per capability, '.' as '_', subject %s, metadata {\"capability\": <name>}", e, s.env.Subjects.Agent(id))
		}
		delete(want, e.Name)
	}
	if len(want) > 0 {
		p.add("$SRV.INFO lacks the endpoints of %v", want)
	}
	var stats micro.Stats
	if _, err := ask("STATS", &stats); err != nil {
		p.add("$SRV.STATS: %v", err)
	}
	echo := false
	for _, e := range stats.Endpoints {
		echo = echo || (e.Name == strings.ReplaceAll(capEcho, ".", "_") && e.NumRequests > 0 && e.ProcessingTime >= 0)
	}
	if !echo {
		p.add("$SRV.STATS counts no %s task, after the rules before called it", capEcho)
	}
	return p.err()
}
