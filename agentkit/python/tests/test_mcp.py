"""The MCP server at the gateway's /mcp (docs/mcp.md), through the official
Python MCP SDK (``mcp`` from PyPI) as a real client nobody here wrote:
tools/list, tools/call, errors as isError results, and tools/list_changed on
an agent joining and leaving, on both protocol revisions the server speaks.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from mcp import Client

from agentreach import Agent
from conftest import Stack, WAIT, unique


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def gateway() -> Any:
    """A stack of its own with the demo agents and the HTTP gateway on."""
    port = _free_port()
    s = Stack("--demo", "--http", f"127.0.0.1:{port}")
    s.mcp_url = f"http://127.0.0.1:{port}/mcp"  # type: ignore[attr-defined]
    yield s
    s.stop()


# A client of each revision: auto negotiates 2026-07-28 (stateless), legacy
# the initialize handshake of 2025-11-25 (a session). The client is entered
# in the test's own task (anyio's cancel scopes must exit where they began).
REVISIONS = {"auto": "2026-07-28", "legacy": "2025-11-25"}


async def _tool_names(c: Client) -> list[str]:
    return [t.name for t in (await c.list_tools()).tools]


async def _wait_tools(c: Client, pred: Any) -> list[str]:
    """Lists until pred holds (a list_changed has said it will)."""
    end = asyncio.get_running_loop().time() + WAIT
    while True:
        names = await _tool_names(c)
        if pred(names) or asyncio.get_running_loop().time() > end:
            return names
        await asyncio.sleep(0.05)


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("mode", sorted(REVISIONS))
async def test_mcp_lists_and_calls(gateway: Stack, mode: str) -> None:
    async with Client(gateway.mcp_url, mode=mode) as mcp:  # type: ignore[attr-defined]
        assert mcp.protocol_version == REVISIONS[mode]
        await _lists_and_calls(mcp)


async def _lists_and_calls(mcp: Client) -> None:
    names = await _wait_tools(mcp, lambda n: {"echo", "math_add", "slow"} <= set(n))
    assert names == sorted(names), "tools/list is ordered by name"
    assert {"echo", "math_add", "slow"} <= set(names)
    tools = {t.name: t for t in (await mcp.list_tools()).tools}
    add = tools["math_add"]
    assert add.meta is not None and add.meta["io.agentreach/capability"] == "math.add"
    assert add.input_schema["type"] == "object"

    res = await mcp.call_tool("echo", {"text": "hi"})
    assert not res.is_error
    assert json.loads(_text(res)) == {"text": "hi"}
    assert res.structured_content == {"text": "hi"}

    res = await mcp.call_tool("math_add", {"a": 2, "b": 3})
    assert not res.is_error and json.loads(_text(res)) == {"sum": 5}

    # A business rejection is a tool result with isError and the Reach code.
    res = await mcp.call_tool("math_add", {"a": 2})
    assert res.is_error and _text(res).startswith("BIZ_REJECT"), _text(res)


async def test_mcp_list_changed_on_join_and_leave(gateway: Stack) -> None:
    """2026-07-28: subscriptions/listen carries tools/list_changed when an
    agent joins and when it leaves."""
    async with Client(gateway.mcp_url) as c:  # type: ignore[attr-defined]
        cap = unique("pyjoin.tool")
        tool = cap.replace(".", "_")
        async with c.listen(tools_list_changed=True) as sub:
            events = sub.__aiter__()
            agent = Agent(gateway.url, type=unique("pyjoin"))

            @agent.handler(cap)
            async def echo(ctx: Any, payload: Any) -> Any:
                return payload

            await agent.start()
            try:
                await asyncio.wait_for(events.__anext__(), WAIT)
                assert tool in await _wait_tools(c, lambda n: tool in n)
                res = await c.call_tool(tool, {"x": 1})
                assert not res.is_error and json.loads(_text(res)) == {"x": 1}
            finally:
                await agent.drain()
            await asyncio.wait_for(events.__anext__(), WAIT)
            assert tool not in await _wait_tools(c, lambda n: tool not in n)
