"""Riding out a store outage: a failed heartbeat is retried soon with
jitter, and an outcome being stored keeps the caller informed."""

from __future__ import annotations

import asyncio
from typing import Any

import agentreach.agent as agent_mod
from agentreach._heartbeat import retry_delay


def test_heartbeat_retry_is_soon_and_jittered() -> None:
    interval = 5.0
    first = [retry_delay(interval, 1) for _ in range(200)]
    # A twentieth of the interval, drawn from its upper half.
    assert all(0.125 <= d <= 0.25 for d in first), (min(first), max(first))
    assert len(set(first)) > 100  # not all the same: agents do not retry together
    later = [retry_delay(interval, n) for n in range(1, 30)]
    assert all(d <= interval / 2 for d in later)  # never a whole interval late
    assert retry_delay(0.1, 1) >= 0.025  # at least 50 ms, from its upper half


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
