"""An unanswered claim that no task took is deleted once the store answers,
also when the task that met it ended waiting first (its deadline came):
otherwise the claim stays pending under a live owner that is not executing
it, and every later attempt at another instance waits for it until the
task's deadline, its PROCESSING keeping the delivery alive."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats
import pytest
from conftest import Stack, poll, unique

import agentreach._idempotency
from agentreach._idempotency import DONE, PENDING, Idempotency, Outcome


async def test_a_wait_that_ends_leaves_an_unadopted_claim_to_abandon(stack: Stack) -> None:
    nc = await nats.connect(stack.url, name="pytest abandon")
    try:
        js = nc.jetstream()
        kv, agents = await js.key_value("REACH_IDEMPOTENCY"), await js.key_value("REACH_AGENTS")
        w1 = Idempotency(kv, agents, "w1", 0.05, incarnation="run-1")
        key = unique("pay.charge") + ".=.k2"
        claim = Outcome(request_id="req-1", owner="w1", incarnation="run-1", state=PENDING).pack()
        await kv.create(key, claim, validate_keys=False)
        w1._unsure[key] = claim  # its create got no answer, though it was stored
        w1._executing.add(key)  # another task of this instance holds the key
        with pytest.raises(asyncio.TimeoutError):
            await w1.begin(key, "req-2", time.time() + 0.2, lambda: None)
        w1._executing.discard(key)  # the holder lets go, without taking the claim

        async def gone() -> bool:
            try:
                await kv.get(key, validate_keys=False)
            except nats.js.errors.KeyNotFoundError:
                return True
            return False

        await poll(gone, "the claim no task took deleted")
        w2 = Idempotency(kv, agents, "w2", 0.05, incarnation="run-2")
        assert await w2.begin(key, "req-3", time.time() + 5, lambda: None) is None, "another instance executes"
    finally:
        await nc.close()


class BehindGets:
    """The idempotency bucket read through a replica that has not applied
    the last writes yet: its next `behind` reads find nothing."""

    def __init__(self, kv: Any, behind: int) -> None:
        self._kv, self.behind = kv, behind

    async def get(self, key: str, **kw: Any) -> Any:
        if self.behind > 0:
            self.behind -= 1
            raise nats.js.errors.KeyNotFoundError()
        return await self._kv.get(key, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)


async def test_an_unanswered_claim_a_replica_does_not_hold_yet_is_abandoned(stack: Stack) -> None:
    """A read that does not find the claim (a replica behind its leader
    answered) is not taken as the claim never stored: abandon asks the
    leader with a create and deletes the claim once it is found. Control: a
    key that is free indeed is left free."""
    nc = await nats.connect(stack.url, name="pytest abandon")
    try:
        js = nc.jetstream()
        kv, agents = await js.key_value("REACH_IDEMPOTENCY"), await js.key_value("REACH_AGENTS")
        behind = BehindGets(kv, 0)
        w1 = Idempotency(behind, agents, "w1", 0.05, incarnation="run-1")
        key, free = unique("pay.charge") + ".=.k3", unique("pay.charge") + ".=.k4"
        claim = Outcome(request_id="req-1", owner="w1", incarnation="run-1", state=PENDING).pack()
        await kv.create(key, claim, validate_keys=False)
        for k in (key, free):
            w1._unsure[k] = claim
            behind.behind = 1
            await w1._abandon(k)
            assert k not in w1._unsure, k
            with pytest.raises(nats.js.errors.KeyNotFoundError):
                await kv.get(k, validate_keys=False)
    finally:
        await nc.close()


class RefusedPuts:
    """The idempotency bucket while it refuses writes (no leader)."""

    def __init__(self, kv: Any) -> None:
        self._kv, self.down = kv, False

    async def put(self, key: str, value: bytes, **kw: Any) -> Any:
        if self.down:
            raise nats.js.errors.ServiceUnavailableError()
        return await self._kv.put(key, value, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)


async def test_an_outcome_not_stored_in_time_is_stored_once_the_store_answers(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """An outcome the store did not take within the settling bound is stored
    once it answers again, the key held meanwhile: the claim does not stay
    pending under this live owner. Control: before the store answers, the
    claim is pending and the key held."""
    monkeypatch.setattr(agentreach._idempotency, "SETTLE_TIMEOUT", 0.2)
    nc = await nats.connect(stack.url, name="pytest settle")
    try:
        js = nc.jetstream()
        kv, agents = await js.key_value("REACH_IDEMPOTENCY"), await js.key_value("REACH_AGENTS")
        puts = RefusedPuts(kv)
        w1 = Idempotency(puts, agents, "w1", 0.05, incarnation="run-1")
        key = unique("pay.charge") + ".=.k5"
        assert await w1.begin(key, "req-1", time.time() + 5, lambda: None) is None
        puts.down = True
        with pytest.raises(Exception):
            await w1.store(key, Outcome(request_id="req-1", data=b'"paid"'))
        assert Outcome.unpack((await kv.get(key, validate_keys=False)).value or b"").state == PENDING
        assert key in w1._executing, "the key was let go before its outcome was stored"
        puts.down = False

        async def stored() -> bool:
            return Outcome.unpack((await kv.get(key, validate_keys=False)).value or b"").state == DONE

        await poll(stored, "the outcome stored once the store answered")
        await poll(lambda: asyncio.sleep(0, key not in w1._executing), "the key let go")
        await w1.close()
    finally:
        await nc.close()
