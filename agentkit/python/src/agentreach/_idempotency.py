"""Idempotent execution through REACH_IDEMPOTENCY (docs/protocol.md, Idempotency).

A key is claimed with a KV create of ``{state: pending, owner, incarnation,
request_id}`` (msgpack), executed, and its outcome stored as ``{state: done,
owner, incarnation, request_id, content_type, data, error, cost}`` before
the reply; a key claimed already is polled with KV gets until its outcome is
stored, then replayed. A create that gets no answer is retried and read
back: a claim of this run that nothing executed under is the task's. At
most max_retrying claims are retried at once; one beyond them is refused at
its first unanswered create (ClaimFailed).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, cast

import msgpack
import nats

PENDING = "pending"
DONE = "done"
SETTLE_TIMEOUT = 30.0  # seconds an outcome is retried into the bucket
CLAIM_RETRY = 10.0  # seconds a claim that gets no answer is retried and read back
PROGRESS_EVERY = 1.0  # seconds between PROCESSING while a claim is retried
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
    incarnation: str = ""

    def pack(self) -> bytes:
        """Returns the record as msgpack with exactly the protocol's field names."""
        rec: dict[str, Any] = {"state": self.state, "owner": self.owner, "request_id": self.request_id}
        if self.incarnation:
            rec["incarnation"] = self.incarnation
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
                   owner=str(rec.get("owner") or ""), state=str(rec.get("state") or ""),
                   incarnation=str(rec.get("incarnation") or ""))


class Idempotency:
    """Idempotency executes each key at most once across every instance."""

    def __init__(self, kv: Any, agents: Any, owner: str, check: float, incarnation: str = "",
                 max_retrying: int = 0):
        self._kv = kv
        self._agents = agents
        self.owner = owner
        self.incarnation = incarnation  # this run of the owner (its record's incarnation)
        self._check = check  # seconds between checks that a claim's owner is alive
        # The keys this instance claims, executes or releases: also its
        # per-key lock (one task of this process claims a key at a time).
        self._executing: set[str] = set()
        # The keys whose claim create got no answer: it may be stored, and
        # nothing ran under it, so this instance may take it or delete it.
        self._unsure: dict[str, bytes] = {}  # each with the claim that got no answer
        self._background: set[asyncio.Task[None]] = set()  # abandons and late settles, until close
        self._abandoning: set[str] = set()  # the keys an abandon looks after, one each
        # Bounds the claims retried at once while the store does not answer
        # (0: no bound). Each one retried holds its task's slot for up to
        # CLAIM_RETRY, so without a bound a store without a leader takes
        # every slot of the agent, and calls that need no claim are refused
        # too.
        self.max_retrying = max_retrying
        self._retrying = 0  # claims retried now

    async def begin(self, key: str, request_id: str, deadline: float,
                    progress: Callable[[], None]) -> Optional[Outcome]:
        """Claims key; returns None to execute, or a stored outcome to replay.

        Raises ClaimFailed (nothing ran), InDoubt, or asyncio.TimeoutError
        when the deadline passes while another execution runs.
        """
        claim = Outcome(request_id=request_id, owner=self.owner, incarnation=self.incarnation, state=PENDING).pack()
        while True:
            if key not in self._executing:
                self._executing.add(key)
                try:
                    mine = await self._claim(key, claim, progress)
                except BaseException:
                    self._executing.discard(key)
                    raise
                if mine:
                    return None
                self._executing.discard(key)
            try:
                stored = await self._wait(key, deadline, progress)
            except BaseException:
                # A claim of this run whose create got no answer, not adopted
                # (the wait ended first): deleted once the store answers, or
                # every later attempt waits for this live owner.
                if key in self._unsure:
                    self._look_after(key)
                raise
            if stored is not None:
                return stored
            # The claim was given back without an outcome: claim it again.

    async def _claim(self, key: str, claim: bytes, progress: Callable[[], None]) -> bool:
        """Creates key's claim: True when it is this task's, False when
        another execution holds it. A create that gets no answer is retried
        for CLAIM_RETRY seconds, reading the key back after each (it may have
        been stored), with PROCESSING every PROGRESS_EVERY seconds; then
        ClaimFailed, and the claim is deleted once the store answers. A
        claim beyond max_retrying retried at once gets ClaimFailed at its
        first unanswered create, and is looked after the same way."""
        end = time.monotonic() + CLAIM_RETRY
        last_progress = time.monotonic()
        wait = 0.05
        reserved = False  # counted in retrying
        try:
            while True:
                try:
                    await asyncio.wait_for(self._kv.create(key, claim, validate_keys=False), 2.0)
                    self._unsure.pop(key, None)
                    return True
                except nats.js.errors.KeyWrongLastSequenceError:
                    return await self._adopt(key)
                except Exception as e:
                    err = e
                # No answer: it may be stored, even after "no responders"
                # (a chaos run found such a claim stored).
                self._unsure[key] = claim
                if not reserved:
                    if self.max_retrying and self._retrying >= self.max_retrying:
                        self._look_after(key)
                        raise ClaimFailed(f"claim: {err!r} ({self.max_retrying} claims already wait for the store)") \
                            from err
                    reserved = True
                    self._retrying += 1
                if await self._adopt(key):
                    return True
                if time.monotonic() + wait > end:
                    self._look_after(key)
                    raise ClaimFailed(f"claim: {err!r}") from err
                await asyncio.sleep(wait)
                wait = min(2 * wait, 1.0)
                if time.monotonic() - last_progress >= PROGRESS_EVERY:
                    last_progress = time.monotonic()
                    progress()
        finally:
            if reserved:
                self._retrying -= 1

    def _look_after(self, key: str) -> None:
        """Starts deleting key's unanswered claim once the store answers
        (_abandon), unless an abandon already looks after it."""
        if key in self._abandoning:
            return
        self._abandoning.add(key)
        self._in_background(self._abandon(key)).add_done_callback(lambda _: self._abandoning.discard(key))

    def _in_background(self, work: Awaitable[None]) -> asyncio.Future[None]:
        """Runs work until it ends or close cancels it."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def close(self) -> None:
        """Stops what is looked after in the background: unanswered claims,
        outcomes not stored in time (the agent stops)."""
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(set(self._background))

    def _mine(self, rec: Outcome) -> bool:
        return rec.state == PENDING and rec.owner == self.owner and rec.incarnation == self.incarnation

    async def _adopt(self, key: str) -> bool:
        """True when key holds a pending claim of this run whose create got
        no answer: nothing executed under it, so the task holding the key's
        lock takes it (a create stored although its answer was lost)."""
        if key not in self._unsure:
            return False
        try:
            entry = await asyncio.wait_for(self._kv.get(key, validate_keys=False), 2.0)
            rec = Outcome.unpack(entry.value or b"")
        except Exception:
            return False
        if not self._mine(rec):
            return False
        self._unsure.pop(key, None)
        return True

    async def _abandon(self, key: str) -> None:
        """Deletes key's unanswered claim of this run once the store answers,
        unless a task of this instance took the key meanwhile; it looks after
        it until the agent stops (close), however long the store is away."""
        wait = 0.05
        while key in self._unsure:
            if key not in self._executing:
                self._executing.add(key)
                try:
                    entry = await asyncio.wait_for(self._kv.get(key, validate_keys=False), 2.0)
                    if self._mine(Outcome.unpack(entry.value or b"")):
                        await asyncio.wait_for(self._kv.delete(key, last=entry.revision, validate_keys=False), 2.0)
                    self._unsure.pop(key, None)
                    return
                except nats.js.errors.KeyNotFoundError:
                    # A read is a direct get, which a replica answers, also
                    # one that has not applied a create its leader took just
                    # before stepping down (the next leader commits it after
                    # the read). Only the leader can say the key is free: the
                    # claim is created again and, stored, deleted at once.
                    try:
                        rev = await asyncio.wait_for(self._kv.create(key, self._unsure[key], validate_keys=False), 2.0)
                        await asyncio.wait_for(self._kv.delete(key, last=rev, validate_keys=False), 2.0)
                        self._unsure.pop(key, None)
                        return
                    except Exception:
                        pass  # it exists (the read was behind) or no answer: look again
                except Exception:
                    pass
                finally:
                    self._executing.discard(key)
            await asyncio.sleep(wait)
            wait = min(2 * wait, 1.0)

    async def _wait(self, key: str, deadline: float, progress: Callable[[], None]) -> Optional[Outcome]:
        """Polls key with KV gets (agents may create no consumer, so no watch),
        from every POLL_FIRST to every POLL_MAX seconds, until its outcome is
        stored (returned), the claim is given back (None), its owner is gone
        (InDoubt) or the deadline passes (asyncio.TimeoutError)."""
        owner, incarnation = "", ""
        poll = POLL_FIRST
        next_check = time.monotonic() + self._check
        next_progress = time.monotonic() + PROGRESS_EVERY
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise asyncio.TimeoutError()
            await asyncio.sleep(min(poll, left))
            if time.monotonic() >= next_progress:
                next_progress = time.monotonic() + PROGRESS_EVERY
                progress()
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self._check
                if await self._check_owner(key, owner, incarnation):
                    return None  # a claim of this run nothing ran under: claim (take) it
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
            owner, incarnation = rec.owner, rec.incarnation
            poll = min(2 * poll, POLL_MAX)

    async def _check_owner(self, key: str, owner: str, incarnation: str) -> bool:
        """Raises InDoubt when the claim's owner is gone, or is this instance
        not executing it; True for an unanswered claim of this run."""
        if not owner:
            return False
        if owner == self.owner:
            if incarnation != self.incarnation:
                raise InDoubt("an earlier run of this instance (it restarted under the same id) claimed the key "
                              "and did not store its outcome; it is not executed again")
            if key in self._executing:
                return False
            if key in self._unsure:
                return True
            raise InDoubt("this instance claimed the key and did not store its outcome (the store failed); "
                          "it is not executed again")
        try:
            entry = await self._agents.get(owner)
        except nats.js.errors.NotFoundError:
            raise InDoubt(f"instance {owner} left while executing it; it is not executed again") from None
        try:
            current = str(json.loads(entry.value or b"{}").get("incarnation") or "")
        except (ValueError, AttributeError):
            current = ""
        if incarnation and current and current != incarnation:
            raise InDoubt(f"instance {owner} restarted (incarnation {current}, the claim's {incarnation}) while "
                          "executing it; it is not executed again")
        return False

    async def store(self, key: str, outcome: Outcome) -> None:
        """Records key's outcome for replay, retrying for up to 30 s (then in
        the background, _settle)."""
        outcome.state, outcome.owner, outcome.incarnation = DONE, self.owner, self.incarnation
        b = outcome.pack()
        await self._settle(key, lambda: self._kv.put(key, b, validate_keys=False))

    async def release(self, key: str) -> None:
        """Gives a claim back without an outcome, so a retry executes it."""
        await self._settle(key, lambda: self._kv.delete(key, validate_keys=False))

    async def _settle(self, key: str, op: Callable[[], Awaitable[Any]]) -> None:
        """Runs op, key's outcome or release, for up to SETTLE_TIMEOUT; if the
        store has not taken it by then, raises and keeps trying in the
        background until the agent stops (close), still holding key: a task
        of this instance waits for it instead of taking the key for in doubt,
        and another instance's wait on this live owner ends once the store
        answers, not at its task's deadline."""
        try:
            await _retry(op)
        except BaseException:
            self._in_background(self._settle_late(key, op))
            raise
        self._executing.discard(key)

    async def _settle_late(self, key: str, op: Callable[[], Awaitable[Any]]) -> None:
        wait = 0.05
        try:
            while True:
                try:
                    await asyncio.wait_for(op(), 2.0)
                    return
                except Exception:
                    pass
                await asyncio.sleep(wait)
                wait = min(2 * wait, 1.0)
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
