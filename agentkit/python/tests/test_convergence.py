"""Riding out a store outage: a failed heartbeat is retried soon with
jitter, and an outcome being stored keeps the caller informed (the
outage itself: test_store_outage.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import agentreach.agent as agent_mod
from agentreach._heartbeat import put_timeout, retry_delay


def test_heartbeat_retry_delay_bounds() -> None:
    """A failed put is retried after a delay drawn from the upper half of a
    twentieth of the interval, kept between 50 and 250 ms, as agentkit's
    (registry.TestHeartbeatRetryDelayBounds): no backoff."""
    for interval, step in ((5.0, 0.25), (30.0, 0.25), (2.0, 0.1), (1.0, 0.05), (0.02, 0.05)):
        delays = [retry_delay(interval) for _ in range(500)]
        assert all(step / 2 <= d < step for d in delays), (interval, min(delays), max(delays))
        assert len(set(delays)) > 100  # not all the same: agents do not retry together


def test_heartbeat_put_timeout_bounds() -> None:
    """A put is bounded to a fifth of the interval, between 250 ms and 1 s."""
    for interval, want in ((30.0, 1.0), (5.0, 1.0), (2.0, 0.4), (0.2, 0.25)):
        assert put_timeout(interval) == want, interval


class _Ctx:
    def __init__(self) -> None:
        self.progress = 0

    def _progress(self) -> None:
        self.progress += 1


async def test_keep_informed_sends_processing_until_cancelled(monkeypatch: Any) -> None:
    monkeypatch.setattr(agent_mod, "SETTLE_NOTICE", 0.01)
    monkeypatch.setattr(agent_mod, "SETTLE_PROGRESS", 0.01)
    ctx = _Ctx()
    task = asyncio.ensure_future(agent_mod._keep_informed(ctx))  # type: ignore[arg-type]
    for _ in range(500):
        if ctx.progress >= 2:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    sent = ctx.progress
    assert sent >= 2
    await asyncio.sleep(0.05)
    assert ctx.progress == sent  # none after the store answered
