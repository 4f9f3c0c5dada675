"""A tool-calling agent whose tools are capabilities, LangChain-style, without LangChain.

The tools are served as Agent-Reach capabilities (``tools.weather``,
``tools.convert``, ``tools.add``), each declared in REACH_CAPS with a
description and an input schema. The loop reads those declarations as its
tool list, asks a model which tool to call, calls it through the
dispatchers, feeds the observation back, and stops at a final answer. The
model here is a tiny rule-based stand-in so the example runs anywhere;
swap ``plan`` for a call to your LLM with ``tools`` as its function list.

    make run                                           # the stack, in another terminal
    .venv/bin/python agentkit/python/examples/tool_agent.py "What is the weather in Paris, in fahrenheit?"
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from typing import Any, Optional

import nats

from agentreach import Agent, Client, ConnectError, Reject

TOOLS = [
    {"name": "tools.weather", "description": "Current temperature of a city in celsius", "mode": "read",
     "idempotent": True, "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}},
    {"name": "tools.convert", "description": "Converts a temperature from celsius to fahrenheit", "mode": "read",
     "idempotent": True, "input_schema": {"type": "object", "properties": {"celsius": {"type": "number"}},
                                          "required": ["celsius"]}},
    {"name": "tools.add", "description": "Adds two numbers", "mode": "read", "idempotent": True,
     "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                      "required": ["a", "b"]}},
]
CITIES = {"paris": 18.5, "shanghai": 24.0, "oslo": 4.0}


def serve_tools(server: str) -> Agent:
    """Returns an agent serving every tool as a capability, declared with its schema."""
    agent = Agent(server, type="tools", declaration={"description": "Tools for tool-calling agents",
                                                     "capabilities": TOOLS})

    @agent.handler("tools.weather")
    async def weather(ctx, args: dict) -> dict:
        city = str(args.get("city", "")).lower()
        if city not in CITIES:
            raise Reject(f"no weather for {args.get('city')!r}")
        return {"city": city, "celsius": CITIES[city]}

    @agent.handler("tools.convert")
    async def convert(ctx, args: dict) -> dict:
        return {"fahrenheit": round(args["celsius"] * 9 / 5 + 32, 1)}

    @agent.handler("tools.add")
    async def add(ctx, args: dict) -> dict:
        return {"sum": args["a"] + args["b"]}

    return agent


def plan(question: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]) -> dict[str, Any]:
    """The model: returns the next step, {"tool", "args"} or {"answer"}.

    A stand-in for an LLM's function calling: it sees the question, the
    tool list (names, descriptions, input schemas) and what the tools said.
    """
    names = {t["name"] for t in tools}
    seen = {h["tool"]: h["result"] for h in history}
    q = question.lower()
    if m := re.search(r"(\d+(?:\.\d+)?)\s*\+\s*(\d+(?:\.\d+)?)", q):
        if "tools.add" not in seen and "tools.add" in names:
            return {"tool": "tools.add", "args": {"a": float(m[1]), "b": float(m[2])}}
        return {"answer": f"{m[1]} + {m[2]} = {seen['tools.add']['sum']:g}"}
    city = next((c for c in CITIES if c in q), None)
    if city is None:
        return {"answer": "I have no tool for that."}
    if "tools.weather" not in seen:
        return {"tool": "tools.weather", "args": {"city": city}}
    if "error" in seen["tools.weather"]:
        return {"answer": f"I could not get the weather: {seen['tools.weather']['error']}"}
    celsius = seen["tools.weather"]["celsius"]
    if "fahrenheit" in q and "tools.convert" not in seen:
        return {"tool": "tools.convert", "args": {"celsius": celsius}}
    if "fahrenheit" in q:
        return {"answer": f"It is {seen['tools.convert']['fahrenheit']}°F in {city.title()}."}
    return {"answer": f"It is {celsius}°C in {city.title()}."}


async def tool_list(nc: nats.NATS, agent_type: str) -> list[dict[str, Any]]:
    """Reads the tools from the REACH_CAPS declaration of an agent type."""
    kv = await nc.jetstream().key_value("REACH_CAPS")
    return json.loads((await kv.get(agent_type)).value)["capabilities"]


async def answer(client: Client, tools: list[dict[str, Any]], question: str, max_steps: int = 5,
                 trace: Optional[list[str]] = None) -> str:
    """Runs the tool-calling loop for one question and returns the final answer."""
    history: list[dict[str, Any]] = []
    for _ in range(max_steps):
        step = plan(question, tools, history)
        if "answer" in step:
            return step["answer"]
        try:
            result = (await client.call(step["tool"], step["args"], timeout=10)).value
        except Reject as e:  # a tool's refusal is an observation, not a crash
            result = {"error": e.message}
        if trace is not None:
            trace.append(f"{step['tool']}({json.dumps(step['args'])}) -> {json.dumps(result)}")
        history.append({"tool": step["tool"], "args": step["args"], "result": result})
    return "I gave up after too many steps."


async def main(question: str) -> None:
    server = os.environ.get("AGENTREACH_SERVER", "nats://127.0.0.1:4222")
    tools_agent = serve_tools(server)
    await tools_agent.start()
    client = await Client.connect(server, content_type="application/json", source="tool-agent")
    try:
        trace: list[str] = []
        final = await answer(client, await tool_list(client.nc, "tools"), question, trace=trace)
        for line in trace:
            print("  tool:", line)
        print(final)
    finally:
        await client.close()
        await tools_agent.drain()


if __name__ == "__main__":
    try:
        asyncio.run(main(" ".join(sys.argv[1:]) or "What is the weather in Paris, in fahrenheit?"))
    except ConnectError as e:
        sys.exit(f"tool_agent: {e}")
