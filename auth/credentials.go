package auth

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"

	"github.com/agent-reach/agentreach/auth/signature"
	"github.com/agent-reach/agentreach/streams"
)

// HeaderSignature carries a task's proof that its Reach-Source is its
// sender: "v2.<unix ms>.<base64url HMAC-SHA256>" (docs/security.md).
const HeaderSignature = streams.HeaderSignature

// HeaderReplayedBy names the dispatcher identity that replayed a parked
// task (SignReplay): its signature, not the caller's, proves the task.
const HeaderReplayedBy = streams.HeaderReplayedBy

// Tags the user JWTs of Agent-Reach identities carry (lowercase, as JWT
// tags are).
const (
	tagRole     = "reach-role:"
	tagType     = "reach-type:"
	tagVerifier = "reach-verifier:"
)

// LoadSigner reads the credentials file of an Agent-Reach identity (as
// `agentreach auth` writes it): its name and the verifier's public key from
// the JWT, its seed.
func LoadSigner(credsFile string) (*signature.Signer, error) {
	c, err := readCreds(credsFile)
	if err != nil {
		return nil, err
	}
	if c.verifier == "" {
		return nil, fmt.Errorf("%w: %s: not made by `agentreach auth` (its JWT names no verifier key): it cannot sign Reach-Source",
			signature.ErrInvalidCredentials, credsFile)
	}
	s, err := signature.NewSigner(c.name, c.seed, c.verifier)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", credsFile, err)
	}
	return s, nil
}

// LoadVerifier reads a verifier seed file (keys/verifier.nk of a store).
func LoadVerifier(file string) (*signature.Verifier, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", signature.ErrInvalidCredentials, err)
	}
	v, err := signature.NewVerifier([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return v, nil
}

// creds is what an Agent-Reach credentials file says.
type creds struct {
	name, role, typ, verifier string
	seed                      []byte
}

// readCreds reads a credentials file: the user JWT and the seed.
func readCreds(file string) (creds, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return creds{}, fmt.Errorf("%w: %v", signature.ErrInvalidCredentials, err)
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return creds{}, fmt.Errorf("%w: %s: %v", signature.ErrInvalidCredentials, file, err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return creds{}, fmt.Errorf("%w: %s: the user JWT: %v", signature.ErrInvalidCredentials, file, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return creds{}, fmt.Errorf("%w: %s: the seed: %v", signature.ErrInvalidCredentials, file, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return creds{}, fmt.Errorf("%w: %s: the seed: %v", signature.ErrInvalidCredentials, file, err)
	}
	if pub, _ := kp.PublicKey(); pub != uc.Subject {
		return creds{}, fmt.Errorf("%w: %s: the seed is not the JWT's user key", signature.ErrInvalidCredentials, file)
	}
	c := creds{name: uc.Name, seed: seed}
	for _, t := range uc.Tags {
		switch {
		case strings.HasPrefix(t, tagRole):
			c.role = strings.TrimPrefix(t, tagRole)
		case strings.HasPrefix(t, tagType):
			c.typ = strings.TrimPrefix(t, tagType)
		case strings.HasPrefix(t, tagVerifier):
			c.verifier = strings.ToUpper(strings.TrimPrefix(t, tagVerifier))
		}
	}
	if c.role != "" && streams.ValidateInstanceID(c.name) != nil {
		return creds{}, errors.Join(signature.ErrInvalidCredentials, fmt.Errorf("%s: the JWT's name %q is not an identity name", file, c.name))
	}
	return c, nil
}
