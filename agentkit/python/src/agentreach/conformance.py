"""The conformance agent: ``python -m agentreach.conformance``.

It serves the capabilities of docs/conformance.md with this SDK and passes
``agentreach conformance -- <venv>/bin/python -m agentreach.conformance``.
It reads AGENTREACH_SERVER (default nats://127.0.0.1:4222),
AGENTREACH_AGENT_ID (default conformance-<random>), AGENTREACH_PREFIX and,
where auth is on, AGENTREACH_CREDS: its identity's credentials file, as
``agentreach conformance --auth`` sets it (the agent then connects with them
and reads replies under ``_INBOX.<id>``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import sys
from collections import Counter
from dataclasses import dataclass

from . import Agent, Context, InvalidConfig, Reject
from .auth import InvalidCredentials

MAX_CONCURRENT = 4


@dataclass
class Slow:
    """Slow is the payload of conformance.slow and conformance.busy."""

    ms: int = 0
    every_ms: int = 0

    def __post_init__(self) -> None:
        if self.ms < 0 or self.every_ms < 0:
            raise ValueError("ms and every_ms must not be negative")


def build(server: str, agent_id: str, prefix: str = "reach", credentials: str | None = None) -> Agent:
    """Returns the conformance agent, its five capabilities registered; with
    credentials (a file) it connects as that identity."""
    agent = Agent(server, type="conformance", id=agent_id, max_concurrent=MAX_CONCURRENT, version="1.0.0",
                  prefix=prefix, credentials=credentials)
    executions: Counter[str] = Counter()

    @agent.handler("conformance.echo")
    async def echo(ctx: Context, payload: bytes) -> bytes:
        # A caller that asked for a stream gets a JSON array's elements as
        # chunks first (docs/conformance.md, stream).
        if ctx.streaming and ctx.content_type == "application/json":
            try:
                items = json.loads(payload)
            except ValueError:
                items = None
            if isinstance(items, list):
                for item in items:
                    await ctx.send(item)
        return payload

    @agent.handler("conformance.reject")
    async def reject(ctx: Context, payload: object) -> None:
        raise Reject("conformance.reject refuses every task")

    @agent.handler("conformance.slow")
    async def slow(ctx: Context, p: Slow) -> dict[str, int]:
        loop = asyncio.get_running_loop()
        end = loop.time() + p.ms / 1000
        while (left := end - loop.time()) > 0:
            step = min(left, p.every_ms / 1000) if p.every_ms else left
            await asyncio.sleep(step)
            if p.every_ms and end - loop.time() > 0:
                ctx.progress()
        return {"slept_ms": p.ms}

    @agent.handler("conformance.busy")
    async def busy(ctx: Context, p: Slow) -> dict[str, int]:
        await asyncio.sleep(p.ms / 1000)
        return {}

    @agent.handler("conformance.write")
    async def write(ctx: Context, payload: object) -> dict[str, object]:
        key = ctx.idempotency_key
        executions[key] += 1
        return {"key": key, "executions": executions[key]}

    return agent


def main() -> int:
    """Runs the conformance agent until SIGTERM; the exit status is 0 after a clean drain."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s python-conformance: %(message)s")
    server = os.environ.get("AGENTREACH_SERVER", "nats://127.0.0.1:4222")
    agent_id = os.environ.get("AGENTREACH_AGENT_ID") or f"conformance-{secrets.token_hex(5)}"
    prefix = os.environ.get("AGENTREACH_PREFIX") or "reach"
    credentials = os.environ.get("AGENTREACH_CREDS") or None
    try:
        agent = build(server, agent_id, prefix, credentials)
    except InvalidCredentials as e:
        print(f"AGENTREACH_CREDS: {e}", file=sys.stderr)
        return 1
    except InvalidConfig as e:
        print(f"AGENTREACH_AGENT_ID {agent_id!r}: {e}", file=sys.stderr)
        return 1
    try:
        asyncio.run(agent.run())
    except Exception as e:
        print(f"conformance agent: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
