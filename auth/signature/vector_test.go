package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-reach/agentreach/streams"
)

// The Reach-Signature test vector (docs/security.md): a fixed identity,
// verifier key and task, and the signature every SDK must compute for
// them. agentkit/python/tests/test_signature.py checks the same values.
const (
	vectorName         = "billing-1"
	vectorUserSeed     = "SUAD7H2HTNLVXQWQA3M356LE6JLTR4BF4XJRQFC4JJSIA5YRBXR4EFUZ7E"
	vectorUserKey      = "UDUEBKI246WD3APZV2YMLLRXAN7222CDONKBJGTKADFFJMTTULKGP2HF"
	vectorVerifierSeed = "SXABVZKN4XOSFHWCMDOUZXUWBEIPC5DZ4P666B73YXZERDYZPBM5OHH6WU"
	vectorVerifierKey  = "XD2YXAWYGSHSF7ZRFY5QRAKSJ4IOWT7OLQWJ5QIGD2DFKMHWAPJBUSAM"
	vectorRequestID    = "r-42"
	vectorSubject      = "reach.task.payment.execute"
	vectorUnixMilli    = 1700000000123
	vectorDeadline     = "1700000030123"
	vectorIdempotency  = "order-42"
	vectorBody         = `{"amount":1}`
	// What the SDKs must get: the MAC key, and the signature.
	vectorMACKey    = "83fb7736bfa6344e69351eb44c35a5b6d308b58ba79810e933212210e81218bf"
	vectorSignature = "v2.1700000000123.BlvM-C70iJrcRSVSp_up0kQo0L33P4g-u5zSratedps"
)

func vectorTask() *nats.Msg {
	m := nats.NewMsg(vectorSubject)
	m.Header.Set(streams.HeaderRequestID, vectorRequestID)
	m.Header.Set(streams.HeaderDeadline, vectorDeadline)
	m.Header.Set(streams.HeaderIdempotencyKey, vectorIdempotency)
	m.Data = []byte(vectorBody)
	return m
}

func TestSignatureVector(t *testing.T) {
	s, err := NewSigner(vectorName, []byte(vectorUserSeed), vectorVerifierKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(s.key); got != vectorMACKey {
		t.Errorf("MAC key %s, want %s", got, vectorMACKey)
	}
	m := vectorTask()
	s.Sign(m, time.UnixMilli(vectorUnixMilli))
	if got := m.Header.Get(streams.HeaderSignature); got != vectorSignature {
		t.Errorf("signature %s, want %s", got, vectorSignature)
	}
	// The signed string, spelt out as docs/security.md defines it.
	digest := sha256.Sum256([]byte(vectorBody))
	signed := "agentreach-signature-v2\x00" + vectorName + "\x00" + vectorRequestID + "\x00" + vectorSubject + "\x00" +
		"1700000000123\x00" + vectorDeadline + "\x00" + vectorIdempotency + "\x00" + hex.EncodeToString(digest[:])
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(signed))
	if want := "v2.1700000000123." + base64.RawURLEncoding.EncodeToString(h.Sum(nil)); want != m.Header.Get(streams.HeaderSignature) {
		t.Errorf("the signer signs another string than the documented one: %s, spelt out %s", m.Header.Get(streams.HeaderSignature), want)
	}
	// And the dispatchers' side derives the same key.
	v, err := NewVerifier([]byte(vectorVerifierSeed))
	if err != nil {
		t.Fatal(err)
	}
	if at, err := v.Verify(m, vectorName, vectorUserKey); err != nil || at.UnixMilli() != vectorUnixMilli {
		t.Errorf("verify: %v at %v", err, at)
	}
}
