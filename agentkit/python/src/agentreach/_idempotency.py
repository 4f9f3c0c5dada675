"""Idempotent execution through REACH_IDEMPOTENCY (docs/protocol.md, Idempotency).

A key is claimed with a KV create of ``{state: pending, owner, request_id}``
(msgpack), executed, and its outcome stored as ``{state: done, owner,
request_id, content_type, data, error, cost}`` before the reply; a key
claimed already is polled with KV gets until its outcome is stored, then
replayed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, cast

import msgpack
import nats

PENDING = "pending"
DONE = "done"
SETTLE_TIMEOUT = 30.0  # seconds an outcome is retried into the bucket
POLL_FIRST = 0.02  # seconds before the first look at a pending claim, doubling
POLL_MAX = 0.25  # up to this


class InDoubt(Exception):
    """InDoubt: the owner of a claim left before storing an outcome."""


class ClaimFailed(Exception):
    """ClaimFailed: the bucket could not be reached; nothing ran."""


@dataclass
class Outcome:
    """Outcome is a stored record: what to replay."""

    request_id: str
    content_type: str = ""
    data: bytes = b""
    error: Optional[dict[str, str]] = None
    cost: str = ""
    owner: str = ""
    state: str = DONE

    def pack(self) -> bytes:
        """Returns the record as msgpack with exactly the protocol's field names."""
        rec: dict[str, Any] = {"state": self.state, "owner": self.owner, "request_id": self.request_id}
        if self.state == DONE:
            rec.update(content_type=self.content_type, data=self.data, error=self.error, cost=self.cost)
        return cast(bytes, msgpack.packb(rec, use_bin_type=True))

    @classmethod
    def unpack(cls, b: bytes) -> "Outcome":
        """Reads a record any agent may have written."""
        rec = msgpack.unpackb(b, raw=False)
        if not isinstance(rec, dict):
            raise ValueError("not a msgpack map")
        data = rec.get("data") or b""
        if isinstance(data, str):
            data = data.encode()
        err = rec.get("error")
        return cls(request_id=str(rec.get("request_id") or ""), content_type=str(rec.get("content_type") or ""),
                   data=bytes(data), error=err if isinstance(err, dict) else None, cost=str(rec.get("cost") or ""),
                   owner=str(rec.get("owner") or ""), state=str(rec.get("state") or ""))


class Idempotency:
    """Idempotency executes each key at most once across every instance."""

    def __init__(self, kv: Any, agents: Any, owner: str, check: float):
        self._kv = kv
        self._agents = agents
        self.owner = owner
        self._check = check  # seconds between checks that a claim's owner is alive
        self._executing: set[str] = set()

    async def begin(self, key: str, request_id: str, deadline: float,
                    progress: Callable[[], None]) -> Optional[Outcome]:
        """Claims key; returns None to execute, or a stored outcome to replay.

        Raises ClaimFailed (nothing ran), InDoubt, or asyncio.TimeoutError
        when the deadline passes while another execution runs.
        """
        claim = Outcome(request_id=request_id, owner=self.owner, state=PENDING).pack()
        while True:
            try:
                await self._kv.create(key, claim, validate_keys=False)
                self._executing.add(key)
                return None
            except nats.js.errors.KeyWrongLastSequenceError:
                pass
            except Exception as e:
                raise ClaimFailed(f"claim: {e!r}") from e
            stored = await self._wait(key, deadline, progress)
            if stored is not None:
                return stored
            # The claim was given back without an outcome: claim it again.

    async def _wait(self, key: str, deadline: float, progress: Callable[[], None]) -> Optional[Outcome]:
        """Polls key with KV gets (agents may create no consumer, so no watch),
        from every POLL_FIRST to every POLL_MAX seconds, until its outcome is
        stored (returned), the claim is given back (None), its owner is gone
        (InDoubt) or the deadline passes (asyncio.TimeoutError)."""
        owner = ""
        poll = POLL_FIRST
        next_check = time.monotonic() + self._check
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise asyncio.TimeoutError()
            await asyncio.sleep(min(poll, left))
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self._check
                progress()
                await self._check_owner(key, owner)
            try:
                entry = await self._kv.get(key, validate_keys=False)
            except nats.js.errors.KeyNotFoundError:
                return None  # deleted or purged: the claim was given back
            except asyncio.TimeoutError:
                raise
            except Exception as e:  # the bucket is unreachable now: this attempt runs nothing
                raise ClaimFailed(f"read the claim: {e!r}") from e
            rec = Outcome.unpack(entry.value or b"")
            if rec.state == DONE:
                return rec
            owner = rec.owner
            poll = min(2 * poll, POLL_MAX)

    async def _check_owner(self, key: str, owner: str) -> None:
        if not owner:
            return
        if owner == self.owner:
            if key not in self._executing:
                raise InDoubt("this instance claimed the key and did not store its outcome (the store failed, "
                              "or it restarted under the same id); it is not executed again")
            return
        try:
            await self._agents.get(owner)
        except nats.js.errors.NotFoundError:
            raise InDoubt(f"instance {owner} left while executing it; it is not executed again") from None

    async def store(self, key: str, outcome: Outcome) -> None:
        """Records key's outcome for replay, retrying for up to 30 s."""
        outcome.state, outcome.owner = DONE, self.owner
        b = outcome.pack()
        try:
            await _retry(lambda: self._kv.put(key, b, validate_keys=False))
        finally:
            self._executing.discard(key)

    async def release(self, key: str) -> None:
        """Gives a claim back without an outcome, so a retry executes it."""
        try:
            await _retry(lambda: self._kv.delete(key, validate_keys=False))
        finally:
            self._executing.discard(key)


async def _retry(op: Callable[[], Awaitable[Any]]) -> None:
    end = time.monotonic() + SETTLE_TIMEOUT
    wait = 0.05
    while True:
        try:
            await asyncio.wait_for(op(), 2.0)
            return
        except Exception:
            if time.monotonic() + wait > end:
                raise
        await asyncio.sleep(wait)
        wait = min(2 * wait, 1.0)
