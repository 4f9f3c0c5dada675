// Package signature makes and checks Reach-Signature, the proof that a
// task's Reach-Source is its sender, and the other proofs keyed by an
// identity's MAC key: durable submission ids and HTTP bearer tokens
// (docs/security.md).
//
// A Signer holds one identity's MAC key, derived from its nkey seed and the
// dispatchers' verifier public key; a Verifier, the verifier's private key,
// from which a dispatcher derives the same MAC key for any identity. One
// X25519 per identity and one HMAC-SHA256 per task: no signature is ever
// sent ahead or stored.
//
// It reads no file and keeps no directory of identities: package auth reads
// credentials (auth.LoadSigner, auth.LoadVerifier) and decides who is known,
// revoked or granted (auth.Authorizer).
package signature
