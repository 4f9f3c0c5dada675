"""Agent-Reach identities in Python: credentials files, connect options and
Reach-Signature, as docs/security.md and docs/protocol.md define them.

An identity made by ``agentreach auth`` connects with its credentials file
and its own inbox prefix, and signs every task it sends so that dispatchers
with auth on accept its ``Reach-Source``::

    from agentreach import Client
    from agentreach.auth import Credentials

    creds = Credentials.load("billing-1.creds")
    nc = await nats.connect(url, **creds.connect_options())
    client = Client(nc, signer=creds.signer())

``Client.connect(url, credentials=...)`` and ``Agent(url, ...,
credentials=...)`` do both. Needs the ``auth`` extra (nkeys, PyNaCl):
``pip install 'agentreach[auth]'``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Optional

from . import _wire as w
from .errors import InvalidConfig

SIGNATURE_HEADER = "Reach-Signature"

_MAC_KEY_LABEL = b"agentreach-mac-key-v1"
_SIGNATURE_LABEL = b"agentreach-signature-v2"
_BEARER_LABEL = b"agentreach-bearer-v1"
_SUBMISSION_LABEL = b"agentreach-submission-v1"

# nkeys' prefix bytes: a seed, a user key, a curve (X25519) key.
_PREFIX_SEED = 18 << 3
_PREFIX_USER = 20 << 3
_PREFIX_CURVE = 23 << 3

_TAG_ROLE = "reach-role:"
_TAG_TYPE = "reach-type:"
_TAG_VERIFIER = "reach-verifier:"

_BLOCK = re.compile(r"-{3,}[^\n]*BEGIN[^\n]*-{3,}\s*\n\s*(\S+)\s*\n\s*-{3,}[^\n]*END", re.MULTILINE)


class InvalidCredentials(InvalidConfig):
    """A credentials file that cannot be read, or cannot sign."""


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, as nkeys checks its keys."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def _decode(key: str) -> bytes:
    """Decodes an nkey (base32, without padding, a CRC-16 at its end)."""
    try:
        raw = base64.b32decode(key + "=" * (-len(key) % 8))
    except (binascii.Error, ValueError) as e:
        raise InvalidCredentials(f"not an nkey: {e}") from None
    if len(raw) < 4 or int.from_bytes(raw[-2:], "little") != _crc16(raw[:-2]):
        raise InvalidCredentials("not an nkey: its checksum does not match")
    return raw[:-2]


def _encode(prefix: int, raw: bytes) -> str:
    body = bytes([prefix]) + raw
    return base64.b32encode(body + _crc16(body).to_bytes(2, "little")).decode().rstrip("=")


def _user_seed(seed: str) -> bytes:
    """The 32 raw bytes of a user seed ("SU…")."""
    raw = _decode(seed)
    kind = ((raw[0] & 7) << 5) | ((raw[1] & 248) >> 3)
    if raw[0] & 248 != _PREFIX_SEED or kind != _PREFIX_USER or len(raw) != 34:
        raise InvalidCredentials("the seed is not a user nkey seed")
    return raw[2:]


def _curve_key(key: str) -> bytes:
    """The 32 raw bytes of a curve public key ("X…")."""
    raw = _decode(key)
    if raw[0] != _PREFIX_CURVE or len(raw) != 33:
        raise InvalidCredentials(f"verifier key {key!r} is not a curve public key")
    return raw[1:]


def _nacl() -> Any:
    """PyNaCl, which the auth extra installs."""
    try:
        import nacl.bindings
        import nacl.signing
    except ImportError:
        raise InvalidConfig("identities need PyNaCl and nkeys: pip install 'agentreach[auth]'") from None
    return nacl


def _b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


@dataclass(frozen=True)
class Credentials:
    """An identity's credentials file, as ``agentreach auth`` writes it."""

    path: str
    name: str
    role: str
    type: str
    verifier: str
    user: str
    seed: str

    @classmethod
    def load(cls, path: str) -> "Credentials":
        """Reads a credentials file: its user JWT and seed."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InvalidCredentials(f"{path}: {e}") from None
        blocks = _BLOCK.findall(text)
        if len(blocks) < 2:
            raise InvalidCredentials(f"{path}: want a user JWT and a seed block")
        token, seed = blocks[0], blocks[1]
        parts = token.split(".")
        try:
            claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        except (IndexError, ValueError, binascii.Error) as e:
            raise InvalidCredentials(f"{path}: the user JWT: {e}") from None
        tags = (claims.get("nats") or {}).get("tags") or []
        found = {p: next((t[len(p):] for t in tags if isinstance(t, str) and t.startswith(p)), "")
                 for p in (_TAG_ROLE, _TAG_TYPE, _TAG_VERIFIER)}
        c = cls(path=path, name=str(claims.get("name", "")), role=found[_TAG_ROLE], type=found[_TAG_TYPE],
                verifier=found[_TAG_VERIFIER].upper(), user=str(claims.get("sub", "")), seed=seed)
        if c._public_key() != c.user:
            raise InvalidCredentials(f"{path}: the seed is not the JWT's user key")
        if c.role and w.id_problem(c.name):
            raise InvalidCredentials(f"{path}: the JWT's name {c.name!r} is not an identity name")
        return c

    def _public_key(self) -> str:
        return _encode(_PREFIX_USER, bytes(_nacl().signing.SigningKey(_user_seed(self.seed)).verify_key))

    def connect_options(self) -> dict[str, Any]:
        """nats.connect's options for this identity: the credentials and, for
        an Agent-Reach identity, its inbox prefix (the only inboxes its
        permissions let it read)."""
        opts: dict[str, Any] = {"user_credentials": self.path}
        if self.role:
            opts["inbox_prefix"] = f"_INBOX.{self.name}"
        return opts

    def signer(self) -> "Signer":
        """The Signer of this identity; only credentials made by
        ``agentreach auth`` (whose JWT names the verifier key) can sign."""
        if not self.verifier:
            raise InvalidCredentials(f"{self.path}: not made by `agentreach auth` (its JWT names no verifier key): "
                                     "it cannot sign Reach-Source")
        return Signer(self.name, self.seed, self.verifier)


class Signer:
    """Signs the tasks one identity sends (Reach-Source, Reach-Signature).

    The MAC key is HMAC-SHA256 keyed by the X25519 agreement of the
    identity's key (its ed25519 seed in Montgomery form) and the dispatchers'
    verifier key; a dispatcher derives the same key from its side. Safe to
    share between tasks.
    """

    def __init__(self, name: str, seed: str, verifier: str):
        nacl = _nacl()
        problem = w.id_problem(name)
        if problem:
            raise InvalidCredentials(f"name: {problem}")
        raw = _user_seed(seed)
        user = _encode(_PREFIX_USER, bytes(nacl.signing.SigningKey(raw).verify_key))
        scalar = hashlib.sha512(raw).digest()[:32]  # RFC 8032 §5.1.5; X25519 clamps it
        shared = nacl.bindings.crypto_scalarmult(scalar, _curve_key(verifier))
        h = hmac.new(shared, digestmod=hashlib.sha256)
        for part in (_MAC_KEY_LABEL, name.encode(), user.encode(), verifier.encode()):
            h.update(part + b"\x00")
        self.name = name
        self._key = h.digest()

    def signature(self, request_id: str, subject: str, body: bytes, now: Optional[float] = None, *,
                  deadline: str = "", idempotency_key: str = "") -> str:
        """The Reach-Signature of a task: v2.<unix ms>.<base64url MAC> over
        "agentreach-signature-v2" 0 source 0 request-id 0 subject 0 unix-ms 0
        deadline 0 idempotency-key 0 hex(SHA-256(body)), where deadline and
        idempotency-key are the task's Reach-Deadline and
        Reach-Idempotency-Key as sent ("" when absent)."""
        ms = str(int((time.time() if now is None else now) * 1000))
        h = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (_SIGNATURE_LABEL, self.name.encode(), request_id.encode(), subject.encode(), ms.encode(),
                     deadline.encode(), idempotency_key.encode()):
            h.update(part + b"\x00")
        h.update(hashlib.sha256(body).hexdigest().encode())
        return f"v2.{ms}.{_b64url(h.digest())}"

    def sign(self, subject: str, headers: dict[str, str], body: bytes) -> None:
        """Sets headers' Reach-Source to this identity and its Reach-Signature
        over headers' request id (which must be set), subject, Reach-Deadline,
        Reach-Idempotency-Key and body. Sign once the task is complete: a
        dispatcher refuses a task changed since."""
        headers[w.H_SOURCE] = self.name
        headers[SIGNATURE_HEADER] = self.signature(headers.get(w.H_REQUEST_ID, ""), subject, body,
                                                   deadline=headers.get(w.H_DEADLINE, ""),
                                                   idempotency_key=headers.get(w.H_IDEMPOTENCY_KEY, ""))

    def submission_id(self, request_id: str) -> str:
        """The Nats-Msg-Id of this identity's durable submission of request_id:
        ``<name>.<request-id>.<proof>``, the same on every resubmission, and
        one no other identity can make (so none can pre-empt it within
        REACH_TASKS' deduplication window)."""
        h = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (_SUBMISSION_LABEL, self.name.encode(), request_id.encode()):
            h.update(part + b"\x00")
        return f"{self.name}.{request_id}.{_b64url(h.digest()[:16])}"

    def bearer(self) -> str:
        """The identity's HTTP bearer token for a dispatcher's gateway
        (Authorization: Bearer <token>), as ``agentreach auth token`` prints it."""
        mac = hmac.new(self._key, _BEARER_LABEL + b"\x00" + self.name.encode(), hashlib.sha256).digest()
        return f"ar1.{self.name}.{_b64url(mac)}"

