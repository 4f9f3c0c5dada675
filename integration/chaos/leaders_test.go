//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/internal/natstest"
)

// leadersTo makes node i lead the JetStream meta group and every stream
// (REACH_TASKS, the buckets, the outcome streams): a leadership transfer
// to it for each group led elsewhere, repeated (bounded) until all are
// there.
func (s *stack) leadersTo(i int) {
	t := s.t
	t.Helper()
	name := s.c.nodes[i].name
	sys := connect(t, []string{s.c.sysURL(0)}, "chaos-sys")
	defer sys.Close()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": name}})
	// stepdown asks a group to hand its leadership to name, then waits
	// (bounded) until its leader has changed, so that the next request is
	// not made in the middle of the election it started.
	stepdown := func(nc *nats.Conn, subject string, leader func() (string, error), was string) error {
		resp, err := nc.Request(subject, req, 5*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", subject, err)
		}
		var r struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if json.Unmarshal(resp.Data, &r) == nil && r.Error != nil {
			return fmt.Errorf("%s: %s", subject, r.Error.Description)
		}
		return natstest.Poll(15*time.Second, func() error {
			l, err := leader()
			if err != nil {
				return err
			}
			if l == "" || l == was {
				return fmt.Errorf("%s: leader still %q", subject, l)
			}
			return nil
		})
	}
	natstest.WaitFor(t, 3*time.Minute, func() error {
		meta := func() (string, error) { return s.c.metaLeader(0) }
		l, err := meta()
		if err != nil {
			return err
		}
		if l != name {
			if err := stepdown(sys, "$JS.API.META.LEADER.STEPDOWN", meta, l); err != nil {
				return err
			}
			return fmt.Errorf("meta leader was %q", l)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var names []string
		lister := s.js.StreamNames(ctx)
		for n := range lister.Name() {
			names = append(names, n)
		}
		if err := lister.Err(); err != nil {
			return err
		}
		for _, n := range names {
			leader := func() (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				st, err := s.js.Stream(ctx, n)
				if err != nil {
					return "", err
				}
				info, err := st.Info(ctx)
				if err != nil {
					return "", err
				}
				if info.Cluster == nil {
					return "", nil
				}
				return info.Cluster.Leader, nil
			}
			l, err := leader()
			if err != nil {
				return err
			}
			if l != name {
				if err := stepdown(s.nc, "$JS.API.STREAM.LEADER.STEPDOWN."+n, leader, l); err != nil {
					return err
				}
				return fmt.Errorf("%s leader was %q", n, l)
			}
		}
		t.Logf("%s leads the meta group and %d streams", name, len(names))
		return nil
	})
}

// led is nil when the JetStream meta group and every stream have a leader.
func (s *stack) led() error {
	for i := range s.c.nodes {
		l, err := s.c.metaLeader(i)
		if err != nil {
			return err
		}
		if l == "" {
			return fmt.Errorf("%s sees no meta leader", s.c.nodes[i].name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lister := s.js.ListStreams(ctx)
	n := 0
	for info := range lister.Info() {
		n++
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("stream %s has no leader", info.Config.Name)
		}
	}
	if err := lister.Err(); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no stream listed")
	}
	return nil
}
