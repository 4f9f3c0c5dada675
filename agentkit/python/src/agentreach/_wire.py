"""The wire contract of docs/protocol.md: names, headers, codecs, sizes.

Everything here is what an agent or publisher in any language must agree
on; the rest of the package is built on it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from typing import Any, Mapping, Optional, Union, cast

import msgpack

from .errors import BadRequest, Internal, PayloadTooLarge

# Subjects, buckets and streams.
DEFAULT_PREFIX = "reach"
BUCKET_AGENTS = "REACH_AGENTS"
BUCKET_CAPS = "REACH_CAPS"
BUCKET_IDEMPOTENCY = "REACH_IDEMPOTENCY"
STREAM_RESULTS = "REACH_RESULTS"

# Content types.
JSON = "application/json"
MSGPACK = "application/msgpack"

# Headers.
H_REQUEST_ID = "Reach-Request-Id"
H_ORCHESTRATION_ID = "Reach-Orchestration-Id"
H_TRACEPARENT = "traceparent"
H_SOURCE = "Reach-Source"
H_AGENT = "Reach-Agent"
H_CAPABILITY = "Reach-Capability"
H_IDEMPOTENCY_KEY = "Reach-Idempotency-Key"
H_TIMEOUT = "Reach-Timeout"
H_DEADLINE = "Reach-Deadline"
H_HOPS = "Reach-Hops"
H_VISITS = "Reach-Visits"
H_ATTEMPT = "Reach-Attempt"
H_STATUS = "Reach-Status"
H_ERROR = "Reach-Error"
H_NODE = "Reach-Node"
H_COST = "Reach-Cost"
H_ACTIVE = "Reach-Active"
H_REPLY_TO = "Reach-Reply-To"
H_DIRECT = "Reach-Direct"
H_DELIVERY = "Reach-Delivery"
H_REPLAYED = "Reach-Replayed"
H_IN_DOUBT = "Reach-In-Doubt"
H_AFFINITY_KEY = "Reach-Affinity-Key"
H_BUDGET = "Reach-Budget"
H_QUORUM = "Reach-Quorum"
H_CONTENT_TYPE = "Content-Type"
H_MSG_ID = "Nats-Msg-Id"
H_STREAM = "Reach-Stream"  # a caller's "1": relay the chunks (docs/protocol.md, Streaming results)
H_SEQ = "Reach-Seq"  # a CHUNK's number, from 1
H_CHUNKS = "Reach-Chunks"  # on a streamed result: how many chunks came before it

# Reach-Status values.
ACKED = "ACKED"
PROCESSING = "PROCESSING"
FINISHED = "FINISHED"
FAILED = "FAILED"
TIMEOUT = "TIMEOUT"
CANCEL = "CANCEL"
CHUNK = "CHUNK"

MAX_NAME_LENGTH = 128
DEFAULT_DEADLINE = 60.0  # seconds: a task's deadline when none is given

_CAP_TOKEN = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")
_KV_TOKEN = re.compile(r"[-_=a-zA-Z0-9]+\Z")


def capability_problem(name: object) -> Optional[str]:
    """Returns what is wrong with a capability name (or agent type), or None."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name:
        return "must not be empty"
    if len(name.encode()) > MAX_NAME_LENGTH:
        return f"{name!r} is longer than {MAX_NAME_LENGTH} bytes"
    for token in name.split("."):
        if not _CAP_TOKEN.match(token):
            return (
                f"{name!r} must be dotted lowercase tokens of [a-z0-9_-], "
                "each starting with a letter or digit"
            )
    return None


def id_problem(value: object) -> Optional[str]:
    """Returns what is wrong with an instance id or request id, or None."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value.encode()) > MAX_NAME_LENGTH:
        return f"{value!r} is longer than {MAX_NAME_LENGTH} bytes"
    if not _ID.match(value):
        return f"{value!r} must be letters, digits, '_' and '-', starting with a letter or digit"
    return None


NO_CALLER = "="
"""The caller token of a delivery without Reach-Source (auth off): a valid KV
key token that is no identity's name."""

NO_SOURCE = "_"
"""The <source> token of a durable task that names no Reach-Source (auth off):
its result is on ``reach.result._.<request-id>``; no identity can be named so."""


def result_source(source: str) -> str:
    """Returns the token a caller's durable results are published under: its
    Reach-Source, or NO_SOURCE when there is none; ValueError when the
    source is not one name token."""
    if not source:
        return NO_SOURCE
    problem = id_problem(source)
    if problem:
        raise ValueError(f"{H_SOURCE}: {problem}")
    return source


def idempotency_bucket_key(capability: str, caller: str, key: str) -> str:
    """Returns the REACH_IDEMPOTENCY key of a caller's key: ``<capability>.<caller>.<key>``.

    ``caller`` is the delivery's Reach-Source, ``NO_CALLER`` ("=") when it
    has none, so the same key from two callers is two executions. A caller
    or key that is not 1-128 characters of ``[-_=a-zA-Z0-9]`` is replaced by
    ``sha256-`` and the lowercase hex of the first 16 bytes of its SHA-256.
    """
    return f"{capability}.{_kv_token(caller or NO_CALLER)}.{_kv_token(key)}"


def _kv_token(s: str) -> str:
    if len(s) <= MAX_NAME_LENGTH and _KV_TOKEN.match(s):
        return s
    return "sha256-" + hashlib.sha256(s.encode()).digest()[:16].hex()


def new_request_id() -> str:
    """Returns a fresh request id, a UUID v4."""
    return str(uuid.uuid4())


class Headers:
    """Headers is a case-insensitive read-only view of a message's headers.

    nats.go canonicalises names (``traceparent`` arrives as ``Traceparent``),
    so every lookup ignores case.
    """

    __slots__ = ("_raw", "_lower")

    def __init__(self, raw: Optional[Mapping[str, str]]):
        self._raw = dict(raw or {})
        self._lower = {k.lower(): v for k, v in self._raw.items()}

    def get(self, name: str, default: str = "") -> str:
        """Returns the value of header name, or default."""
        return self._lower.get(name.lower(), default)

    def int(self, name: str) -> int:
        """Returns header name as an integer, 0 when absent or malformed."""
        try:
            return int(self.get(name) or 0)
        except ValueError:
            return 0

    def raw(self) -> dict[str, str]:
        """Returns a copy of the headers as received."""
        return dict(self._raw)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._lower

    def __repr__(self) -> str:
        return f"Headers({self._raw!r})"


def content_type(headers: Headers, body: bytes) -> str:
    """Returns a message's content type by the rule of docs/protocol.md.

    The Content-Type header without parameters when present; otherwise JSON
    for a body that is valid JSON (or empty) and msgpack for anything else.
    """
    ct = headers.get(H_CONTENT_TYPE)
    if ct:
        return ct.split(";", 1)[0].strip().lower()
    if not body.strip():
        return JSON
    try:
        json.loads(body)
        return JSON
    except ValueError:
        return MSGPACK


def encode(ct: str, value: Any) -> bytes:
    """Encodes value in content type ct; failures are Internal errors."""
    if ct == JSON:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise Internal(f"encode JSON: {e}") from e
    if ct == MSGPACK:
        try:
            return cast(bytes, msgpack.packb(value, use_bin_type=True))
        except (TypeError, ValueError, OverflowError) as e:
            raise Internal(f"encode msgpack: {e}") from e
    raise BadRequest(f"unsupported content type {ct!r} (want {MSGPACK} or {JSON})")


def decode(ct: str, body: bytes) -> Any:
    """Decodes body of content type ct; an empty body is None.

    A malformed body or an unsupported content type is a BadRequest that
    says what is wrong.
    """
    if not body.strip():
        return None
    if ct == JSON:
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as e:
            raise BadRequest(f"payload is not valid JSON: {e}") from e
    if ct == MSGPACK:
        try:
            # The library bounds every container by the buffer's size, so a
            # header claiming a billion elements allocates nothing.
            return msgpack.unpackb(body, raw=False, strict_map_key=False)
        except (ValueError, TypeError, RecursionError) as e:
            raise BadRequest(f"payload is not one well-formed msgpack value: {e}") from e
    raise BadRequest(f"unsupported content type {ct!r} (want {MSGPACK} or {JSON})")


def message_size(headers: Mapping[str, str], body: Union[bytes, bytearray]) -> int:
    """Returns what a message counts against the server's max_payload.

    The body plus the header block: ``NATS/1.0\\r\\n``, ``Name: value\\r\\n``
    per header, then ``\\r\\n``.
    """
    n = len(body)
    if headers:
        n += len("NATS/1.0\r\n\r\n")
        for k, v in headers.items():
            if k.strip():  # the client library strips both and skips an empty name
                n += len(k.strip().encode()) + len(str(v).strip().encode()) + 4
    return n


def check_size(headers: Mapping[str, str], body: Union[bytes, bytearray], max_payload: int) -> None:
    """Raises PayloadTooLarge when the message, headers and body, exceeds
    max_payload (0 checks nothing). Check where the message is sent, with
    every header it carries: the client library counts only the body, and
    the server closes the connection of a publish it refuses."""
    size = message_size(headers, body)
    if max_payload > 0 and size > max_payload:
        raise PayloadTooLarge(f"message of {size} bytes ({size - len(body)} of headers + {len(body)} of body) exceeds "
                              f"the server's max_payload of {max_payload} bytes, which counts headers and body")


def unix_ms(t: float) -> str:
    """Returns wall-clock time t (seconds) as integer unix milliseconds."""
    return str(int(t * 1000))


def deadline_of(headers: Headers) -> float:
    """Returns Reach-Deadline as wall-clock seconds, or now + 60 s."""
    ms = headers.int(H_DEADLINE)
    if ms > 0:
        return ms / 1000.0
    return time.time() + DEFAULT_DEADLINE
