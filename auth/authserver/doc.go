// Package authserver configures an embedded nats-server for an identity
// store (package auth): operator mode with a full account resolver that
// takes account updates at run time, and TLS. It is apart from auth so
// that agents and callers, which import auth to sign, do not link the
// server. See auth's example for both at work.
package authserver
