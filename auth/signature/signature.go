package signature

import (
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/agent-reach/agentreach/streams"
)

// signatureVersion starts every Reach-Signature value; oldSignatureVersion
// is the version dispatchers no longer accept.
const (
	signatureVersion    = "v2"
	oldSignatureVersion = "v1"
)

// A task's signature is an HMAC-SHA256 over
//
//	"agentreach-signature-v2" 0 source 0 request-id 0 subject 0 unix-ms 0
//	deadline 0 idempotency-key 0 hex(SHA-256(body))
//
// where deadline and idempotency-key are the task's Reach-Deadline and
// Reach-Idempotency-Key values as sent (first value; empty when absent) and
// the body's digest is 64 lowercase hex digits,
// keyed by the identity's MAC key: HMAC-SHA256 keyed by the X25519 shared
// secret of the identity's nkey (its ed25519 key in Montgomery form) and
// the dispatchers' verifier key, over "agentreach-mac-key-v1" 0 name 0
// user public key 0 verifier public key. The caller computes the secret
// from its seed and the verifier's public key, a dispatcher from the
// verifier's private key and the user's public key; neither ever sends it.
// One X25519 per identity and one HMAC per task: an ed25519 signature and
// verification per task cost more CPU than routing the task does.
const (
	macKeyLabel    = "agentreach-mac-key-v1"
	signatureLabel = "agentreach-signature-v2"
)

// Signer signs the tasks one identity sends. It is safe for concurrent use.
type Signer struct {
	name string
	key  []byte
	pool sync.Pool // *macState keyed by key
}

// NewSigner returns the signer of identity name, whose user nkey seed is
// seed ("SU…"), for the dispatchers whose verifier public key is verifier
// ("X…").
func NewSigner(name string, seed []byte, verifier string) (*Signer, error) {
	if err := streams.ValidateInstanceID(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: user seed: %v", ErrInvalidCredentials, err)
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, fmt.Errorf("%w: the seed is not a user nkey", ErrInvalidCredentials)
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: user seed: %v", ErrInvalidCredentials, err)
	}
	vpub, err := curvePublic(verifier)
	if err != nil {
		return nil, err
	}
	// The X25519 scalar of an ed25519 key is the first half of the seed's
	// SHA-512 (clamped by X25519 itself), RFC 8032 §5.1.5.
	h := sha512.Sum512(raw)
	priv, err := ecdh.X25519().NewPrivateKey(h[:32])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredentials, err)
	}
	shared, err := priv.ECDH(vpub)
	if err != nil {
		return nil, fmt.Errorf("%w: verifier key: %v", ErrInvalidCredentials, err)
	}
	return newSigner(name, macKey(shared, name, pub, verifier)), nil
}

func newSigner(name string, key []byte) *Signer {
	s := &Signer{name: name, key: key}
	s.pool.New = func() any { return &macState{h: hmac.New(sha256.New, key)} }
	return s
}

// Name is the identity the signer signs as.
func (s *Signer) Name() string { return s.name }

// Sign sets m's Reach-Source to the signer's identity and Reach-Signature
// to the proof over it, m's request id (which must be set), subject,
// Reach-Deadline, Reach-Idempotency-Key and body, at time now. Sign m after
// its last change: the dispatcher refuses a task changed since.
func (s *Signer) Sign(m *nats.Msg, now time.Time) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(streams.HeaderSource, s.name)
	m.Header.Del(streams.HeaderReplayedBy)
	s.SignAs(m, s.name, now)
}

// SignReplay signs m, a parked task resubmitted to the durable tier by this
// signer's identity (a dispatcher identity: `agentreach dlq replay`), as
// the replay of its Reach-Source's task: it sets Reach-Replayed-By to the
// signer's identity and Reach-Signature to the signer's proof over m with
// its Reach-Source as source. Dispatchers accept it only on the durable
// tier and only from a dispatcher identity (docs/security.md).
func (s *Signer) SignReplay(m *nats.Msg, now time.Time) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(streams.HeaderReplayedBy, s.name)
	s.SignAs(m, m.Header.Get(streams.HeaderSource), now)
}

// SignAs sets m's Reach-Signature to the signer's proof over m with source
// as the signed source, changing no other header: a dispatcher re-signing a
// parked task as its caller. Sign and SignReplay set the headers that go
// with it.
func (s *Signer) SignAs(m *nats.Msg, source string, now time.Time) {
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	m.Header.Set(streams.HeaderSignature, signatureVersion+"."+ms+"."+s.mac(m, source, ms))
}

// mac computes the signature of m, as sent by source, at ms (the decimal
// unix milliseconds).
func (s *Signer) mac(m *nats.Msg, source, ms string) string {
	st := s.pool.Get().(*macState)
	defer s.pool.Put(st)
	b := st.buf[:0]
	for _, part := range [...]string{signatureLabel, source, m.Header.Get(streams.HeaderRequestID), m.Subject, ms,
		m.Header.Get(streams.HeaderDeadline), m.Header.Get(streams.HeaderIdempotencyKey)} {
		b = append(b, part...)
		b = append(b, 0)
	}
	body := sha256.Sum256(m.Data)
	b = hex.AppendEncode(b, body[:])
	st.buf = b
	st.h.Reset()
	st.h.Write(b)
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(st.h.Sum(sum[:0]))
}

// macState is a signer's HMAC and the buffer the signed string is built in.
type macState struct {
	h   hash.Hash
	buf []byte
}

// verify checks m's Reach-Signature against the signer's key, with
// source as the signed source, and returns when it was made.
func (s *Signer) verify(m *nats.Msg, source string) (time.Time, error) {
	at, ms, sig, err := Parse(m.Header.Get(streams.HeaderSignature))
	if err == nil {
		err = s.Check(m, source, ms, sig)
	}
	return at, err
}

// Check reports whether sig is the signer's MAC of m, sent by source, at ms
// (as Parse returns them); the error wraps ErrBadSignature.
func (s *Signer) Check(m *nats.Msg, source, ms, sig string) error {
	if !hmac.Equal([]byte(sig), []byte(s.mac(m, source, ms))) {
		return fmt.Errorf("%w: %s does not match the task for %s (another identity's, or the task — its body, %s or %s — changed after signing)",
			ErrBadSignature, streams.HeaderSignature, s.name, streams.HeaderDeadline, streams.HeaderIdempotencyKey)
	}
	return nil
}

// ErrOldSignature is returned for a Reach-Signature of version v1, which
// dispatchers no longer accept (it covered neither the deadline nor the
// idempotency key).
var ErrOldSignature = fmt.Errorf("%w: %s v1 is no longer accepted: sign with v2 (agentkit, the Python SDK and the CLI of this release do)",
	ErrBadSignature, streams.HeaderSignature)

// Parse splits a Reach-Signature value into its time (also as
// the decimal milliseconds it was written as) and its MAC, which must be
// the 43 characters of an unpadded base64url SHA-256.
func Parse(v string) (at time.Time, ms, sig string, err error) {
	version, rest, ok1 := strings.Cut(v, ".")
	if ok1 && version == oldSignatureVersion {
		return time.Time{}, "", "", ErrOldSignature
	}
	ms, sig, ok2 := strings.Cut(rest, ".")
	n, perr := strconv.ParseInt(ms, 10, 64)
	if !ok1 || !ok2 || version != signatureVersion || perr != nil || n <= 0 || len(sig) != macLen {
		return time.Time{}, "", "", fmt.Errorf("%w: %s %q: want v2.<unix ms>.<base64url MAC>", ErrBadSignature, streams.HeaderSignature, v)
	}
	return time.UnixMilli(n), ms, sig, nil
}

// macLen is the length of a base64url (unpadded) HMAC-SHA256.
var macLen = base64.RawURLEncoding.EncodedLen(sha256.Size)

// macKey derives an identity's MAC key from the X25519 shared secret.
func macKey(shared []byte, name, user, verifier string) []byte {
	h := hmac.New(sha256.New, shared)
	for _, part := range []string{macKeyLabel, name, user, verifier} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// Verifier is the dispatchers' side of Reach-Signature: the private half
// of the verifier key (made by `agentreach auth init`), from which it
// derives each identity's MAC key. It is safe for concurrent use.
type Verifier struct {
	priv *ecdh.PrivateKey
	pub  string

	mu      sync.Mutex
	signers map[string]*Signer // name + user key → its signer
}

// NewVerifier returns the verifier whose curve seed ("SX…") is seed.
func NewVerifier(seed []byte) (*Verifier, error) {
	kp, err := nkeys.FromCurveSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: verifier seed: %v", ErrInvalidCredentials, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: verifier seed: %v", ErrInvalidCredentials, err)
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: verifier seed: %v", ErrInvalidCredentials, err)
	}
	priv, err := ecdh.X25519().NewPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: verifier seed: %v", ErrInvalidCredentials, err)
	}
	return &Verifier{priv: priv, pub: pub, signers: map[string]*Signer{}}, nil
}

// PublicKey is the verifier's public key ("X…"), which callers' JWTs name.
func (v *Verifier) PublicKey() string { return v.pub }

// Signer returns the signer of identity name with user key user: the same
// MAC key the identity derives from its seed, for checking its signatures
// (Check) and making its proofs.
func (v *Verifier) Signer(name, user string) (*Signer, error) {
	k := name + "\x00" + user
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.signers[k]; ok {
		return s, nil
	}
	pub, err := userCurvePublic(user)
	if err != nil {
		return nil, err
	}
	shared, err := v.priv.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: user key of %s: %v", ErrInvalidCredentials, name, err)
	}
	s := newSigner(name, macKey(shared, name, user, v.pub))
	v.signers[k] = s
	return s, nil
}

// Verify checks that m's Reach-Signature was made by identity name, whose
// user key is user, and returns when it was made.
func (v *Verifier) Verify(m *nats.Msg, name, user string) (time.Time, error) {
	s, err := v.Signer(name, user)
	if err != nil {
		return time.Time{}, err
	}
	return s.verify(m, name)
}

// curvePublic decodes a curve public key ("X…").
func curvePublic(key string) (*ecdh.PublicKey, error) {
	raw, err := nkeys.Decode(nkeys.PrefixByteCurve, []byte(key))
	if err == nil {
		var pub *ecdh.PublicKey
		if pub, err = ecdh.X25519().NewPublicKey(raw); err == nil {
			return pub, nil
		}
	}
	return nil, fmt.Errorf("%w: verifier public key %q: %v", ErrInvalidCredentials, key, err)
}

// p25519 is the field prime of curve25519, 2^255 - 19.
var p25519 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))

// userCurvePublic maps a user nkey (an ed25519 public key, "U…") to its
// X25519 public key: the Montgomery u = (1 + y) / (1 - y) of its Edwards y
// (RFC 7748 §4.1).
func userCurvePublic(user string) (*ecdh.PublicKey, error) {
	raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(user))
	if err != nil || len(raw) != 32 {
		return nil, fmt.Errorf("%w: user key %q: %v", ErrInvalidCredentials, user, err)
	}
	le := make([]byte, 32)
	for i := range raw {
		le[31-i] = raw[i] // little-endian to big-endian
	}
	le[0] &= 0x7f // the sign bit of x
	y := new(big.Int).SetBytes(le)
	one := big.NewInt(1)
	den := new(big.Int).Mod(new(big.Int).Sub(one, y), p25519)
	if den.Sign() == 0 {
		return nil, fmt.Errorf("%w: user key %q is not a usable point", ErrInvalidCredentials, user)
	}
	u := new(big.Int).Mul(new(big.Int).Add(one, y), den.ModInverse(den, p25519))
	u.Mod(u, p25519)
	be := u.FillBytes(make([]byte, 32))
	for i, j := 0, 31; i < j; i, j = i+1, j-1 {
		be[i], be[j] = be[j], be[i]
	}
	pub, err := ecdh.X25519().NewPublicKey(be)
	if err != nil {
		return nil, fmt.Errorf("%w: user key %q: %v", ErrInvalidCredentials, user, err)
	}
	return pub, nil
}
