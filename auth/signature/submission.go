package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// submissionLabel separates a submission id's MAC from every other use of
// the identity's MAC key (signatures, bearer tokens).
const submissionLabel = "agentreach-submission-v1"

// SubmissionID returns the Nats-Msg-Id of the identity's durable
// submission of requestID:
//
//	name "." request id "." base64url(first 16 bytes of HMAC-SHA256(MAC key, "agentreach-submission-v1" 0 name 0 request id))
//
// REACH_TASKS deduplicates on it. It is the same on every resubmission (so
// the identity's own resubmission within the window is deduplicated) and
// no other identity can make it without the identity's key: a publish that
// only claims "<name>.<request id>" deduplicates nothing of the identity's
// (docs/security.md, durable results). Nothing verifies it; it only has to
// be unforgeable.
func (s *Signer) SubmissionID(requestID string) string {
	h := hmac.New(sha256.New, s.key)
	for _, part := range []string{submissionLabel, s.name, requestID} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return s.name + "." + requestID + "." + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}
