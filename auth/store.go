package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/internal/atomicfile"
)

// The files of a store (docs/security.md).
const (
	stateFile    = "store.json"
	lockFile     = ".lock"
	keysDir      = "keys"
	identityKeys = "keys/identities"
	credsDir     = "creds"
	// AccountName names the account every identity lives in; it owns the
	// JetStream buckets and streams.
	AccountName = "AGENTREACH"
	// SystemAccountName names the system account, whose user pushes
	// account updates.
	SystemAccountName = "SYS"
)

// storeVersion is the version of store.json this package writes.
const storeVersion = 1

// lockWait bounds how long a change waits for another process's.
const lockWait = 10 * time.Second

// state is store.json.
type state struct {
	Version       int        `json:"version"`
	Operator      string     `json:"operator"`
	SystemAccount string     `json:"system_account"`
	Account       string     `json:"account"`
	Verifier      string     `json:"verifier"`
	Revision      uint64     `json:"revision"`
	Identities    []Identity `json:"identities"`
}

// Store is an identity store in a directory: the operator, the system and
// AGENTREACH accounts, the verifier key and every identity, with the
// credentials files it wrote. Seeds are files of mode 0600 under keys/;
// credentials are creds/<name>.creds. Several processes may use one store:
// changes take a lock file and rewrite store.json atomically, and Reload
// picks up another process's. A Store is safe for concurrent use.
type Store struct {
	dir string

	mu sync.Mutex
	st state
}

// Init creates a store in dir (made if missing): the operator, the system
// account and its user, the AGENTREACH account and the verifier key. It
// refuses a directory that holds one already (ErrStoreExists).
func Init(dir string) (*Store, error) {
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
		return nil, fmt.Errorf("%w in %s", ErrStoreExists, dir)
	}
	for _, d := range []string{dir, filepath.Join(dir, keysDir), filepath.Join(dir, identityKeys), filepath.Join(dir, credsDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
	}
	s := &Store{dir: dir, st: state{Version: storeVersion}}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var keys [4]string
	for i, f := range []struct {
		name   string
		create func() (nkeys.KeyPair, error)
	}{
		{"operator", nkeys.CreateOperator}, {"system", nkeys.CreateAccount}, {"account", nkeys.CreateAccount}, {"verifier", nkeys.CreateCurveKeys},
	} {
		if keys[i], err = s.newKey(filepath.Join(keysDir, f.name+".nk"), f.create); err != nil {
			return nil, err
		}
	}
	s.st.Operator, s.st.SystemAccount, s.st.Account, s.st.Verifier = keys[0], keys[1], keys[2], keys[3]
	sysKP, err := s.seed(filepath.Join(keysDir, "system.nk"))
	if err != nil {
		return nil, err
	}
	if err := s.writeUser(s.SystemCredsFile(), "sys", sysKP, nil, ""); err != nil {
		return nil, err
	}
	if err := s.save(s.st); err != nil {
		return nil, err
	}
	return s, nil
}

// Open opens the store in dir, or returns ErrNoStore.
func Open(dir string) (*Store, error) {
	s := &Store{dir: dir}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// CredsFile is where the credentials of identity name are.
func (s *Store) CredsFile(name string) string { return filepath.Join(s.dir, credsDir, name+".creds") }

// SystemCredsFile is the credentials of the system account's user, which
// pushes account updates (Syncer). Operators only.
func (s *Store) SystemCredsFile() string { return filepath.Join(s.dir, keysDir, "sys.creds") }

// VerifierFile is the verifier seed every dispatcher needs to check
// Reach-Signature (`agentreach dispatcher --verifier`).
func (s *Store) VerifierFile() string { return filepath.Join(s.dir, keysDir, "verifier.nk") }

// Revision counts the store's changes.
func (s *Store) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Revision
}

// snapshot returns the state as last loaded.
func (s *Store) snapshot() state {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Identities returns every identity, revoked ones included, sorted by role
// (dispatchers, agents, callers) and name.
func (s *Store) Identities() []Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Clone(s.st.Identities)
	slices.SortFunc(ids, func(a, b Identity) int {
		if ra, rb := slices.Index(Roles(), a.Role), slices.Index(Roles(), b.Role); ra != rb {
			return ra - rb
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ids
}

// Identity returns the identity called name.
func (s *Store) Identity(name string) (Identity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.st.Identities, func(id Identity) bool { return id.Name == name })
	if i < 0 {
		return Identity{}, false
	}
	return s.st.Identities[i], true
}

// Add makes identity id (Name, Role, and Type and Serves for an agent): its user key,
// a scoped signing key of the account for it, and its credentials file
// (CredsFile). The identity can connect once the servers have the account
// JWT that holds its signing key (Syncer pushes it). A name in use, revoked
// or not, is refused with ErrIdentityExists.
func (s *Store) Add(id Identity) (Identity, error) {
	id = Identity{Name: id.Name, Role: id.Role, Type: id.Type, Serves: slices.Clone(id.Serves), Carries: slices.Clone(id.Carries)}
	if err := id.validate(); err != nil {
		return Identity{}, err
	}
	err := s.change(func(st *state) error {
		if slices.ContainsFunc(st.Identities, func(o Identity) bool { return o.Name == id.Name }) {
			return fmt.Errorf("%w: %s (names are never reused, not even after a revocation)", ErrIdentityExists, id.Name)
		}
		var err error
		if id.SigningKey, err = s.newKey(filepath.Join(identityKeys, id.Name+".nk"), nkeys.CreateAccount); err != nil {
			return err
		}
		user, err := nkeys.CreateUser()
		if err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		if id.PublicKey, err = user.PublicKey(); err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		sk, err := s.seed(filepath.Join(identityKeys, id.Name+".nk"))
		if err != nil {
			return err
		}
		if err := s.writeUser(s.CredsFile(id.Name), id.Name, sk, user, st.Account, id.tags(st.Verifier)...); err != nil {
			return err
		}
		id.Created = time.Now().UTC().Truncate(time.Second)
		st.Identities = append(st.Identities, id)
		return nil
	})
	return id, err
}

// SetServes replaces agent name's grant with serves (nil: its type and
// everything under it, Identity.Grant) and returns the identity. The
// dispatchers route by the new grant once the Syncer has written its
// directory entry; its credentials stay as they are. A revoked identity
// or one that is no agent is refused.
func (s *Store) SetServes(name string, serves []string) (Identity, error) {
	var out Identity
	err := s.change(func(st *state) error {
		i := slices.IndexFunc(st.Identities, func(id Identity) bool { return id.Name == name })
		if i < 0 {
			return fmt.Errorf("%w: %s", ErrUnknownIdentity, name)
		}
		id := st.Identities[i]
		switch {
		case !id.Active():
			return fmt.Errorf("%w: %s was revoked at %s", ErrInvalidIdentity, name, id.Revoked.Format(time.RFC3339))
		case id.Role != RoleAgent:
			return fmt.Errorf("%w: %s %s: only an agent serves capabilities (--serves)", ErrInvalidIdentity, id.Role, name)
		}
		id.Serves = slices.Clone(serves)
		if err := id.validate(); err != nil {
			return err
		}
		st.Identities[i] = id
		out = id
		return nil
	})
	return out, err
}

// tags are what the identity's user JWT says about it.
func (id Identity) tags(verifier string) []string {
	tags := []string{tagRole + string(id.Role), tagVerifier + strings.ToLower(verifier)}
	if id.Type != "" {
		tags = append(tags, tagType+id.Type)
	}
	return tags
}

// Revoke revokes identity name: the next account JWT lists its user key as
// revoked and drops its signing key, so the servers close its connections
// and refuse new ones, and the identity directory marks it revoked, so the
// dispatchers refuse its signatures. Its signing key's seed is deleted;
// its credentials file stays, of no use any more (a client still holding
// it is told "authentication revoked" and stops reconnecting).
// Revoking twice is harmless and returns the first revocation.
func (s *Store) Revoke(name string) (Identity, error) {
	var out Identity
	err := s.change(func(st *state) error {
		i := slices.IndexFunc(st.Identities, func(id Identity) bool { return id.Name == name })
		if i < 0 {
			return fmt.Errorf("%w: %s", ErrUnknownIdentity, name)
		}
		if st.Identities[i].Active() {
			st.Identities[i].Revoked = time.Now().UTC().Truncate(time.Second)
			_ = os.Remove(filepath.Join(s.dir, identityKeys, name+".nk"))
		}
		out = st.Identities[i]
		return nil
	})
	return out, err
}

// Reload re-reads store.json and reports whether another process changed
// the store since.
func (s *Store) Reload() (bool, error) {
	before := s.Revision()
	if err := s.load(); err != nil {
		return false, err
	}
	return s.Revision() != before, nil
}

func (s *Store) load() error {
	b, err := os.ReadFile(filepath.Join(s.dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w in %s (run `agentreach auth init --dir %s`)", ErrNoStore, s.dir, s.dir)
	}
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("auth: %s: %w", filepath.Join(s.dir, stateFile), err)
	}
	if st.Version != storeVersion {
		return fmt.Errorf("auth: %s: version %d, this agentreach reads version %d", filepath.Join(s.dir, stateFile), st.Version, storeVersion)
	}
	s.mu.Lock()
	if st.Revision >= s.st.Revision { // never back to an older state
		s.st = st
	}
	s.mu.Unlock()
	return nil
}

// change applies f to the latest state under the store's lock and saves
// it with the revision raised; on an error nothing is saved.
func (s *Store) change(f func(*state) error) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.load(); err != nil {
		return err
	}
	s.mu.Lock()
	st := s.st
	st.Identities = slices.Clone(st.Identities)
	s.mu.Unlock()
	if err := f(&st); err != nil {
		return err
	}
	st.Revision++
	if err := s.save(st); err != nil {
		return err
	}
	s.mu.Lock()
	s.st = st
	s.mu.Unlock()
	return nil
}

// save writes st as store.json atomically.
func (s *Store) save(st state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(s.dir, stateFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// lock takes the store's lock file, waiting up to lockWait for another
// process to let go of it.
func (s *Store) lock() (unlock func(), err error) {
	path := filepath.Join(s.dir, lockFile)
	deadline := time.Now().Add(lockWait)
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			fmt.Fprintf(f, "%d\n", os.Getpid())
			_ = f.Close()
			return func() { _ = os.Remove(path) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("auth: lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("auth: %s is held by another process (its id is inside); if none runs, delete the file", path)
		}
		time.Sleep(20 * time.Millisecond) // another process's change takes milliseconds
	}
}

// newKey creates a key pair and writes its seed to rel (mode 0600),
// returning its public key.
func (s *Store) newKey(rel string, create func() (nkeys.KeyPair, error)) (string, error) {
	kp, err := create()
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(s.dir, rel), append(seed, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	return kp.PublicKey()
}

// seed reads the key pair whose seed is the file rel.
func (s *Store) seed(rel string) (nkeys.KeyPair, error) {
	path := filepath.Join(s.dir, rel)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", signature.ErrInvalidCredentials, path, err)
	}
	return kp, nil
}

// writeUser issues a user JWT for user (a fresh key when nil) named name,
// signed by issuer, and writes it with the user's seed as a credentials
// file. With account set, issuer is a scoped signing key of that account,
// whose template gives the user its permissions; without, issuer is the
// account itself and the user may do everything.
func (s *Store) writeUser(path, name string, issuer, user nkeys.KeyPair, account string, tags ...string) error {
	var err error
	if user == nil {
		if user, err = nkeys.CreateUser(); err != nil {
			return fmt.Errorf("auth: %w", err)
		}
	}
	pub, err := user.PublicKey()
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	if account != "" {
		uc.IssuerAccount = account
		uc.SetScoped(true)
	}
	uc.Tags.Add(tags...)
	token, err := uc.Encode(issuer)
	if err != nil {
		return fmt.Errorf("auth: user %s: %w", name, err)
	}
	seed, err := user.Seed()
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	b, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}
