"""Riding out a store that does not answer, as agentkit does: a failed
heartbeat is retried within a fraction of a second, a reconnect puts the
record at once, and keyed calls waiting on an unanswered claim hold half
the slots at most.

A store without a leader answers nothing; here a bucket's stream is
deleted for a while, so each request to it fails at once with "no
responders", and added again as it was. These tests run on a stack of
their own, so no other test sees the bucket gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Iterator

import nats
import pytest
from conftest import Direct, Replies, Stack, poll, running, unique
from nats.js import JetStreamContext

import agentreach._connection
from agentreach import Agent, Context

FINAL = ("FINISHED", "FAILED", "TIMEOUT")


@pytest.fixture(scope="module")
def outage_stack() -> Iterator[Stack]:
    s = Stack()
    yield s
    s.stop()


@asynccontextmanager
async def stream_gone(js: JetStreamContext, name: str) -> AsyncIterator[None]:
    """Deletes stream name for the block, then adds it again as it was (empty)."""
    config = (await js.stream_info(name)).config
    await js.delete_stream(name)
    try:
        yield
    finally:
        await js.add_stream(config)


FAILED = re.compile(r"^heartbeat failed agent=(\S+) failures=(\d+) retry_in=([0-9.]+)s ")
STORED = re.compile(r"^heartbeat stored again agent=(\S+) failed_puts=(\d+)$")


async def test_a_failed_heartbeat_is_put_again_within_a_step(outage_stack: Stack,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """While REACH_AGENTS takes no put, each failed put is logged with the
    count of failures and the retry's delay, which is drawn from the upper
    half of the step (a twentieth of the interval, 50 to 250 ms) however
    many failed before: no backoff. Once the stream is back the record is
    at the first put after (one put in flight as it came back may fail),
    so within a step of the last failure."""
    caplog.set_level(logging.DEBUG, logger="agentreach")
    agent = Agent(outage_stack.url, type="hbretry")
    agent.handle(unique("hbretry.echo"), lambda ctx, p: p)
    nc = await nats.connect(outage_stack.url, name="pytest outage")
    try:
        js = nc.jetstream()
        async with running(agent):
            step = min(max(agent.heartbeat_ms / 1000 / 20, 0.05), 0.25)  # a twentieth of the interval, 50-250 ms

            def failed() -> list[tuple[int, float, float, int]]:
                """(failures, retry_in, when, level) of each failed put logged."""
                out = []
                for r in caplog.records:
                    m = FAILED.match(r.getMessage())
                    if m and m[1] == agent.id:
                        out.append((int(m[2]), float(m[3]), r.created, r.levelno))
                return out

            def stored_again() -> list[int]:
                return [int(m[2]) for r in caplog.records
                        if (m := STORED.match(r.getMessage())) and m[1] == agent.id]

            async with stream_gone(js, "KV_REACH_AGENTS"):
                await poll(lambda: asyncio.sleep(0, len(failed()) >= 8), "eight failed heartbeat puts")
            back = time.time()
            await poll(lambda: asyncio.sleep(0, stored_again()), "the heartbeat stored again")
            kv = await js.key_value("REACH_AGENTS")
            assert json.loads((await kv.get(agent.id)).value or b"")["id"] == agent.id
            runs = failed()
            assert stored_again() == [len(runs)], "one line per failed put"
            assert [f for f, *_ in runs] == list(range(1, len(runs) + 1)), runs
            assert [lvl for *_, lvl in runs] == [logging.WARNING] + [logging.DEBUG] * (len(runs) - 1)
            delays = [d for _, d, _, _ in runs]
            assert all(step / 2 <= d < step for d in delays), f"retry delays {delays}, want [{step / 2}, {step})"
            after = [f for f, _, when, _ in runs if when > back]
            assert len(after) <= 1, f"puts failed after the stream was back: {after}"
    finally:
        await nc.close()


async def test_a_reconnect_puts_the_record_before_its_next_beat(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a 30 s heartbeat, the server restarts between two beats: the
    heartbeat's connection reconnects, and the record is put within a
    second of it (a random share of a quarter interval, at most 1 s), not
    at the next beat."""
    monkeypatch.setattr(agentreach._connection, "RECONNECT_WAIT", 0.25)
    stack = Stack("--heartbeat", "30s")
    try:
        agent = Agent(stack.url, type="hbreconnect")
        agent.handle(unique("hbreconnect.echo"), lambda ctx, p: p)
        async with running(agent):
            hb = agent._hb
            assert hb is not None
            interval = agent.heartbeat_ms / 1000
            assert interval == 30
            started, before = time.monotonic(), hb.puts
            await asyncio.to_thread(stack.halt)
            await asyncio.to_thread(stack.start)
            await poll(lambda: asyncio.sleep(0, hb.puts > before), "a put after the reconnect")
            # Not the beat: that is due an interval after the start.
            assert time.monotonic() - started < interval, "inconclusive: the restart took a whole interval"
    finally:
        stack.stop()


def answered(r: Replies) -> bool:
    return any(s in FINAL for s in r.statuses())


async def test_half_the_slots_at_most_wait_on_an_unanswered_claim(outage_stack: Stack) -> None:
    """While REACH_IDEMPOTENCY answers nothing, keyed calls on all 4 slots:
    2 wait for the store (PROCESSING meanwhile), the other 2 are answered
    TARGET_BUSY at once, naming their key, and a call without a key is
    still served. Once the store is back the 2 waiting run, once each, and
    a refused key runs when asked again: nothing ran under it."""
    cap, plain = unique("claimbound.write"), unique("claimbound.echo")
    agent = Agent(outage_stack.url, type="claimbound", max_concurrent=4)
    runs: dict[str, int] = {}

    @agent.handler(cap)
    async def write(ctx: Context, p: Any) -> dict[str, int]:
        key = ctx.idempotency_key
        runs[key] = runs.get(key, 0) + 1
        return {"n": runs[key]}

    agent.handle(plain, lambda ctx, p: p)
    nc = await nats.connect(outage_stack.url, name="pytest outage")
    try:
        js = nc.jetstream()
        d = Direct(nc, agent.id)
        async with running(agent):
            async with stream_gone(js, "KV_REACH_IDEMPOTENCY"):
                calls = {k: await d.deliver(cap, b"{}", extra={"Reach-Idempotency-Key": k})
                         for k in ("k1", "k2", "k3", "k4")}
                await poll(lambda: asyncio.sleep(0, sum(map(answered, calls.values())) >= 2),
                           "keyed calls answered at once")
                busy = {k for k, r in calls.items() if answered(r)}
                waiting = set(calls) - busy
                assert len(busy) == 2, f"answered at once: {sorted(busy)}, want exactly half"
                for k in busy:
                    m = await calls[k].final()
                    assert m.headers.get("Reach-Error") == "TARGET_BUSY", m.headers
                    message = json.loads(m.data)["message"]
                    assert f"idempotency key {k!r}" in message and "2 claims already wait for the store" in message
                await poll(lambda: asyncio.sleep(0, all("PROCESSING" in calls[k].statuses() for k in waiting)),
                           "PROCESSING from the calls waiting on the store")
                m = await (await d.deliver(plain, b'"still served"')).final()
                assert m.headers.get("Reach-Status") == "FINISHED" and json.loads(m.data) == "still served"
                assert not any(answered(calls[k]) for k in waiting), "the waiting calls still wait"
            for k in waiting:
                m = await calls[k].final()
                assert m.headers.get("Reach-Status") == "FINISHED" and json.loads(m.data) == {"n": 1}, m.headers
            assert runs == {k: 1 for k in waiting}
            k = min(busy)
            m = await (await d.deliver(cap, b"{}", extra={"Reach-Idempotency-Key": k})).final()
            assert m.headers.get("Reach-Status") == "FINISHED" and json.loads(m.data) == {"n": 1}, m.headers
            assert agent._idem is not None and agent._idem._retrying == 0
    finally:
        await nc.close()
