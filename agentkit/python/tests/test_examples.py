"""The README's examples run against a real stack (as they do against `make run`)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import nats
import pytest

from agentreach import Client, Reject
from conftest import poll, python, routed

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


async def test_tool_agent(stack, nc):
    tool_agent = load("tool_agent")
    agent = tool_agent.serve_tools(stack.url)
    await agent.start()
    try:
        client = Client(nc, content_type="application/json")
        await routed(lambda: client.call("tools.add", {"a": 1, "b": 2}, timeout=10))
        tools = await tool_agent.tool_list(nc, "tools")
        assert [t["name"] for t in tools] == ["tools.weather", "tools.convert", "tools.add"]
        trace: list[str] = []
        got = await tool_agent.answer(client, tools, "What is the weather in Paris, in fahrenheit?", trace=trace)
        assert got == "It is 65.3°F in Paris." and len(trace) == 2
        assert await tool_agent.answer(client, tools, "what is 2 + 40.5") == "2 + 40.5 = 42.5"
        got = await tool_agent.answer(client, tools, "weather in oslo")
        assert got == "It is 4.0°C in Oslo."
    finally:
        await agent.drain()


async def test_examples_without_a_server_say_so_in_one_line():
    with socket.socket() as s:  # bound, not listening: connections are refused
        s.bind(("127.0.0.1", 0))
        env = {**os.environ, "AGENTREACH_SERVER": f"nats://127.0.0.1:{s.getsockname()[1]}"}
        outs = await asyncio.gather(*(asyncio.to_thread(subprocess.run, [python(), str(EXAMPLES / f"{name}.py")],
                                                        env=env, capture_output=True, text=True, timeout=60)
                                      for name in ("inventory", "tool_agent")))
    for name, out in zip(("inventory", "tool_agent"), outs):
        assert out.returncode == 1 and out.stderr.startswith(f"{name}: connect to {env['AGENTREACH_SERVER']}: ")
        assert out.stderr.count("\n") == 1, out.stderr


async def test_inventory_example_serves_and_drains_on_sigterm(stack, nc):
    proc = await asyncio.create_subprocess_exec(python(), str(EXAMPLES / "inventory.py"),
                                                env={**os.environ, "AGENTREACH_SERVER": stack.url},
                                                stderr=subprocess.PIPE)
    try:
        kv = await nc.jetstream().key_value("REACH_AGENTS")

        async def registered():
            try:
                return [k for k in await kv.keys() if k.startswith("inventory-")]
            except nats.js.errors.NoKeysError:
                return []

        [agent_id] = await poll(registered, "the inventory agent registered")
        client = Client(nc)
        res = await routed(lambda: client.call("inventory.query", {"sku": "iphone-15-pro-max-256"}, timeout=10))
        assert res.value == {"sku": "iphone-15-pro-max-256", "stock": 12, "currency": "CNY"}
        with pytest.raises(Reject, match="unknown sku"):
            await client.call("inventory.query", {"sku": "nope"}, timeout=10)
        res = await client.call("inventory.reserve", {"sku": "iphone-15-pro-max-256", "qty": 2}, timeout=10)
        assert res.value["left"] == 10
        decl = json.loads((await (await nc.jetstream().key_value("REACH_CAPS")).get("inventory")).value)
        assert [c["name"] for c in decl["capabilities"]] == ["inventory.query", "inventory.reserve"]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert not await registered(), f"{agent_id} deleted its record"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
