"""Streaming results end to end (docs/protocol.md, Streaming results)."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from agentreach import Agent, Context
from conftest import routed, running, unique


async def test_ctx_send_and_client_stream(json_client, stack):
    cap = unique("stream.words")
    agent = Agent(stack.url, type="streamtest")

    @agent.handler(cap)
    async def words(ctx: Context, n: int) -> str:
        out = []
        for i in range(1, n + 1):
            await ctx.send(f"w{i} ")
            out.append(f"w{i} ")
        return "".join(out)

    async with running(agent):
        plain = await routed(lambda: json_client.call(cap, 3, timeout=10))
        assert plain.value == "w1 w2 w3 " and "Reach-Chunks" not in plain.headers  # the control: no stream asked
        got = [r async for r in json_client.stream(cap, 5, timeout=10)]
        chunks, final = got[:-1], got[-1]
        assert [c.status for c in chunks] == ["CHUNK"] * 5
        assert [c.headers.get("Reach-Seq") for c in chunks] == ["1", "2", "3", "4", "5"]
        assert "".join(c.value for c in chunks) == final.value == "w1 w2 w3 w4 w5 "
        assert final.status == "FINISHED" and final.headers.get("Reach-Chunks") == "5"


async def test_async_generator_handler(json_client, stack):
    cap = unique("stream.gen")
    agent = Agent(stack.url, type="streamtest")

    @agent.handler(cap)
    async def story(ctx: Context, n: int) -> AsyncIterator[str]:
        for i in range(n):
            yield f"{i} "

    async with running(agent):
        await routed(lambda: json_client.call(cap, 1, timeout=10))
        got = [r async for r in json_client.stream(cap, 4, timeout=10)]
        assert [r.value for r in got] == ["0 ", "1 ", "2 ", "3 ", "0 1 2 3 "]
        assert got[-1].headers.get("Reach-Chunks") == "4"


async def test_a_reader_that_leaves_cancels_the_task(json_client, stack):
    cap = unique("stream.cancel")
    agent = Agent(stack.url, type="streamtest")
    cancelled = asyncio.Event()

    @agent.handler(cap)
    async def endless(ctx: Context, p: object) -> str:
        if not ctx.streaming:
            return "plain"
        await ctx.send("first")
        await asyncio.wait_for(ctx.cancelled.wait(), 20)
        cancelled.set()
        return "unread"

    async with running(agent):
        await routed(lambda: json_client.call(cap, {}, timeout=10))
        stream = json_client.stream(cap, {}, timeout=30)
        async for r in stream:
            assert r.value == "first"
            break
        await stream.aclose()  # the reader leaves: the client cancels on reach.cancel
        await asyncio.wait_for(cancelled.wait(), 10)
