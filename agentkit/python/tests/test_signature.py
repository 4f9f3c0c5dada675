"""The Reach-Signature test vector (docs/security.md), which auth/vector_test.go
checks in Go: a fixed identity, verifier key and task, and the signature
every SDK must compute for them. No server needed."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

pytest.importorskip("nacl")

from agentreach.auth import SIGNATURE_HEADER, Signer  # noqa: E402

NAME = "billing-1"
USER_SEED = "SUAD7H2HTNLVXQWQA3M356LE6JLTR4BF4XJRQFC4JJSIA5YRBXR4EFUZ7E"
VERIFIER_KEY = "XD2YXAWYGSHSF7ZRFY5QRAKSJ4IOWT7OLQWJ5QIGD2DFKMHWAPJBUSAM"
REQUEST_ID = "r-42"
SUBJECT = "reach.task.payment.execute"
UNIX_MS = 1700000000123
DEADLINE = "1700000030123"
IDEMPOTENCY_KEY = "order-42"
BODY = b'{"amount":1}'
MAC_KEY = "83fb7736bfa6344e69351eb44c35a5b6d308b58ba79810e933212210e81218bf"
SIGNATURE = "v2.1700000000123.BlvM-C70iJrcRSVSp_up0kQo0L33P4g-u5zSratedps"


def test_the_signer_computes_the_vector() -> None:
    s = Signer(NAME, USER_SEED, VERIFIER_KEY)
    assert s._key.hex() == MAC_KEY
    headers = {"Reach-Request-Id": REQUEST_ID, "Reach-Deadline": DEADLINE, "Reach-Idempotency-Key": IDEMPOTENCY_KEY}
    assert s.signature(REQUEST_ID, SUBJECT, BODY, UNIX_MS / 1000, deadline=DEADLINE,
                       idempotency_key=IDEMPOTENCY_KEY) == SIGNATURE
    # sign reads the deadline and the idempotency key from the headers.
    signed = dict(headers)
    s.sign(SUBJECT, signed, BODY)
    assert signed["Reach-Source"] == NAME
    assert signed[SIGNATURE_HEADER].startswith("v2.")


def test_the_signed_string_is_the_documented_one() -> None:
    s = Signer(NAME, USER_SEED, VERIFIER_KEY)
    m = b"\x00".join([b"agentreach-signature-v2", NAME.encode(), REQUEST_ID.encode(), SUBJECT.encode(),
                      str(UNIX_MS).encode(), DEADLINE.encode(), IDEMPOTENCY_KEY.encode(),
                      hashlib.sha256(BODY).hexdigest().encode()])
    mac = hmac.new(bytes.fromhex(MAC_KEY), m, hashlib.sha256).digest()
    assert f"v2.{UNIX_MS}." + base64.urlsafe_b64encode(mac).decode().rstrip("=") == SIGNATURE
    # A changed deadline, idempotency key or body is another signature.
    for change in ({"deadline": "1700000099999", "idempotency_key": IDEMPOTENCY_KEY},
                   {"deadline": DEADLINE, "idempotency_key": "order-43"}):
        assert s.signature(REQUEST_ID, SUBJECT, BODY, UNIX_MS / 1000, **change) != SIGNATURE
    assert s.signature(REQUEST_ID, SUBJECT, BODY + b" ", UNIX_MS / 1000, deadline=DEADLINE,
                       idempotency_key=IDEMPOTENCY_KEY) != SIGNATURE
