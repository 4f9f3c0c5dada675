package auth

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agent-reach/agentreach/internal/failrun"
	"github.com/agent-reach/agentreach/registry"
	"github.com/agent-reach/agentreach/registry/policy"
	"github.com/agent-reach/agentreach/streams"
)

// claimsUpdateSubject is where the system account pushes an account JWT to
// the servers' full resolvers.
const claimsUpdateSubject = "$SYS.REQ.CLAIMS.UPDATE"

// Defaults of SyncConfig.
const (
	DefaultSyncInterval = 250 * time.Millisecond
	DefaultPushTimeout  = 5 * time.Second
)

// SyncConfig configures a Syncer. The zero value means all defaults.
type SyncConfig struct {
	// Subjects names the subjects permissions are generated for; zero
	// means prefix "reach".
	Subjects streams.Subjects
	// Interval is how often the store is checked for another process's
	// change (`agentreach auth agent`, `auth revoke`); default 250 ms.
	Interval time.Duration
	// PushTimeout bounds one account update; default 5 s.
	PushTimeout time.Duration
}

// SyncOption configures a Syncer.
type SyncOption func(*Syncer)

// WithSyncLogger sets the syncer's logger; the default discards.
func WithSyncLogger(l zerolog.Logger) SyncOption { return func(s *Syncer) { s.log = l } }

// Syncer keeps the servers and the dispatchers in step with a store and the
// ACL: whenever an identity is added or revoked, or the acl key of
// REACH_POLICY changes, it regenerates the account JWT — every identity's
// permissions from its role and the ACL — and pushes it to the servers
// through the system account, and it writes each identity's directory
// entry (identity.<name> in REACH_POLICY). Servers then close the
// connections of revoked identities and of identities whose permissions
// changed (those reconnect with the new ones); dispatchers refuse a revoked
// identity's signatures. Run one per store: inside `agentreach up --auth`,
// or `agentreach auth sync` beside the store in production.
//
// Create it with NewSyncer, run it with Start, stop it with Close
// (idempotent). Its methods are safe for concurrent use.
type Syncer struct {
	store *Store
	sys   *nats.Conn
	kv    jetstream.KeyValue
	pol   *registry.PolicyWatcher
	cfg   SyncConfig
	log   zerolog.Logger

	mu     sync.Mutex // one sync at a time
	pushed string     // digest of the account JWT last pushed
	token  string     // the account JWT last pushed, for a leaf added later
	// leaves: each leaf server's system connection (AddLeaf) → confirmed.
	leaves  map[*nats.Conn]string
	written map[string]string
	synced  uint64 // store revision of the last complete sync
	policy  uint64 // REACH_POLICY revision it read the ACL at

	stop     context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// NewSyncer returns a syncer of store that pushes through sys (a
// connection of the system account's user, SystemCredsFile) and reads and
// writes REACH_POLICY through app (a dispatcher identity's connection).
func NewSyncer(ctx context.Context, store *Store, sys, app *nats.Conn, cfg SyncConfig, opts ...SyncOption) (*Syncer, error) {
	if store == nil || sys == nil || app == nil {
		return nil, errors.New("auth: NewSyncer needs a store, a system connection and an application connection")
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultSyncInterval)
	cfg.PushTimeout = cmp.Or(cfg.PushTimeout, DefaultPushTimeout)
	if cfg.Interval < 0 || cfg.PushTimeout < 0 {
		return nil, fmt.Errorf("auth: SyncConfig: Interval %v and PushTimeout %v must be positive", cfg.Interval, cfg.PushTimeout)
	}
	js, err := jetstream.New(app)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, streams.BucketPolicy)
	if err != nil {
		return nil, streams.OpenError("auth", streams.BucketPolicy, err)
	}
	s := &Syncer{store: store, sys: sys, kv: kv, cfg: cfg, log: zerolog.Nop(), written: map[string]string{}, leaves: map[*nats.Conn]string{}}
	for _, o := range opts {
		o(s)
	}
	if s.pol, err = registry.NewPolicyWatcher(ctx, js, registry.WatchLogger(s.log)); err != nil {
		return nil, err
	}
	return s, nil
}

// Start syncs once, returning its error, then keeps syncing until Close.
func (s *Syncer) Start(ctx context.Context) error {
	if err := s.pol.Start(ctx); err != nil {
		return fmt.Errorf("auth: watch %s: %w", streams.BucketPolicy, err)
	}
	if err := s.Sync(ctx); err != nil {
		s.pol.Close()
		return err
	}
	lctx, stop := context.WithCancel(context.Background())
	s.stop, s.done = stop, make(chan struct{})
	go s.loop(lctx)
	return nil
}

// Close stops syncing and waits for the syncer's goroutine.
func (s *Syncer) Close() {
	s.stopOnce.Do(func() {
		if s.stop != nil {
			s.stop()
			<-s.done
		}
		s.pol.Close()
	})
}

// Synced returns the store revision and the REACH_POLICY revision of the
// last complete sync: once they reach Store.Revision and the bucket's
// latest revision, the servers and the directory hold that state.
func (s *Syncer) Synced() (store, policy uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced, s.policy
}

func (s *Syncer) loop(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	var failures failrun.Run
	for {
		changed := s.pol.Changed()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
			if _, err := s.store.Reload(); err != nil {
				failures.Fail(&s.log, zerolog.ErrorLevel).Err(err).Msg("identity store unreadable")
				continue
			}
			// A change that came while a sync ran closed no channel we
			// held: compare revisions too.
			if synced, policy := s.Synced(); s.store.Revision() == synced && s.pol.Revision() == policy && !failures.Failing() && !s.leafPending() {
				continue
			}
		}
		sctx, cancel := context.WithTimeout(ctx, s.cfg.PushTimeout)
		err := s.Sync(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			failures.Fail(&s.log, zerolog.ErrorLevel).Err(err).Msg("identities not synced; retrying")
		} else if n := failures.Succeeded(); err == nil && n > 0 {
			s.log.Info().Int("failed_syncs", n).Msg("identities synced again")
		}
	}
}

// Sync brings the servers and the directory in line with the store and the
// ACL now: the entries of identities in force first (a new identity is
// known to the dispatchers before it can connect), then the account JWT,
// then the entries of revoked ones (a revoked identity loses its
// connections before its signatures are refused).
func (s *Syncer) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.store.Reload(); err != nil {
		return err
	}
	revision, policy := s.store.Revision(), s.pol.Revision()
	ids := s.store.Identities()
	if err := s.writeEntries(ctx, ids, true); err != nil {
		return err
	}
	acl := aclOf(s.pol.Current())
	token, digest, err := s.store.AccountJWT(acl, s.cfg.Subjects)
	if err != nil {
		return err
	}
	if digest != s.pushed {
		if err := push(ctx, s.sys, token); err != nil {
			return err
		}
		s.pushed, s.token = digest, token
		s.log.Info().Int("identities", len(ids)).Strs("acl_grants_for", grantedNames(acl, ids)).Msg("account JWT pushed")
	}
	if err := s.writeEntries(ctx, ids, false); err != nil {
		return err
	}
	if err := s.pushLeaves(ctx); err != nil {
		return err
	}
	s.synced, s.policy = revision, policy
	return nil
}

// AddLeaf makes the syncer push every account JWT to a leaf node server
// too, through sys (the system account's user, SystemCredsFile, connected
// to it): its link carries the AGENTREACH account only, so the hub's pushes
// do not reach it. Its resolver then follows the hub's: a revoked identity
// is cut off there, a new one connects, the ACL holds. AddLeaf pushes now
// and returns that push's error; a leaf that did not confirm is pushed
// again at every tick until it does (Sync returns the error meanwhile).
func (s *Syncer) AddLeaf(ctx context.Context, sys *nats.Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaves[sys] = ""
	return s.pushLeaves(ctx)
}

// leafPending reports whether a leaf server lacks the account JWT.
func (s *Syncer) leafPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sys, pushed := range s.leaves {
		if pushed != s.confirmed(sys) {
			return true
		}
	}
	return false
}

// confirmed is what a push on sys confirms: the account JWT, until sys
// reconnects (the leaf server restarted, maybe from an older config).
func (s *Syncer) confirmed(sys *nats.Conn) string {
	return s.pushed + "@" + strconv.FormatUint(sys.Stats().Reconnects, 10)
}

// pushLeaves pushes the hub's account JWT to the leaves without it.
func (s *Syncer) pushLeaves(ctx context.Context) error {
	if s.token == "" {
		return nil // nothing pushed to the hub yet: Sync will
	}
	var errs []error
	for sys, pushed := range s.leaves {
		if pushed == s.confirmed(sys) {
			continue
		}
		err := fmt.Errorf("%w: not connected (%v)", ErrPush, sys.Status()) // out of reach: holds up nothing else
		if sys.IsConnected() {
			err = push(ctx, sys, s.token)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("leaf server %s: %w", sys.ConnectedUrlRedacted(), err))
			continue
		}
		s.leaves[sys] = s.confirmed(sys)
		s.log.Info().Str("server", sys.ConnectedUrlRedacted()).Msg("account JWT pushed to a leaf server")
	}
	return errors.Join(errs...)
}

// writeEntries writes the directory entries of the identities in force
// (active) or of the revoked ones that differ from what is stored.
func (s *Syncer) writeEntries(ctx context.Context, ids []Identity, active bool) error {
	set := s.pol.Current()
	for _, id := range ids {
		if id.Active() != active {
			continue
		}
		b, err := json.Marshal(entryOf(id))
		if err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		key := PolicyIdentityPrefix + id.Name
		if v, ok := set.Value(key); (ok && string(v.JSON) == string(b)) || s.written[key] == string(b) {
			continue
		}
		if _, err := registry.PutPolicy(ctx, s.kv, key, b); err != nil {
			return fmt.Errorf("auth: write %s: %w", key, err)
		}
		s.written[key] = string(b)
	}
	return nil
}

// push sends an account JWT to the servers of sys and waits for one to
// confirm.
func push(ctx context.Context, sys *nats.Conn, token string) error {
	m, err := sys.RequestWithContext(ctx, claimsUpdateSubject, []byte(token))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrPush, claimsUpdateSubject, err)
	}
	var r struct {
		Data *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("%w: reply %q: %v", ErrPush, m.Data, err)
	}
	if r.Error != nil {
		return fmt.Errorf("%w: %d %s", ErrPush, r.Error.Code, r.Error.Description)
	}
	if r.Data == nil || r.Data.Code != 200 {
		return fmt.Errorf("%w: reply %s", ErrPush, m.Data)
	}
	return nil
}

// aclOf returns the ACL in force in set, or nil (which grants nothing).
func aclOf(set *policy.Set) *policy.ACL {
	if v, ok := set.Value(policy.KeyACL); ok {
		if acl, ok := v.Decoded.(*policy.ACL); ok {
			return acl
		}
	}
	return nil
}

// grantedNames lists the identities in force that acl grants something,
// for the log.
func grantedNames(acl *policy.ACL, ids []Identity) []string {
	var out []string
	for _, id := range ids {
		if id.Active() && id.Role != RoleDispatcher && len(acl.Grants(id.Name)) > 0 {
			out = append(out, id.Name)
		}
	}
	return out
}
