package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// An identity's HTTP bearer token is
//
//	"ar1." name "." base64url(HMAC-SHA256(MAC key, "agentreach-bearer-v1" 0 name))
//
// keyed by the same MAC key as its Reach-Signature (see Signer), so the
// identity derives it from its credentials and a dispatcher from the
// verifier key: nothing new is stored or sent ahead. It names and proves
// the identity for as long as the identity is in the directory and not
// revoked; like any bearer token it is a secret (send it over TLS).
const (
	// BearerVersion starts every bearer token.
	BearerVersion = "ar1"
	bearerLabel   = "agentreach-bearer-v1"
)

// Bearer returns the HTTP bearer token of the signer's identity, for the
// Authorization header of a request to a dispatcher's HTTP gateway.
func (s *Signer) Bearer() string {
	return BearerVersion + "." + s.name + "." + s.bearerMAC()
}

func (s *Signer) bearerMAC() string {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(bearerLabel))
	h.Write([]byte{0})
	h.Write([]byte(s.name))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}
