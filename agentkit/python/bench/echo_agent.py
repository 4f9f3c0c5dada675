"""A Python echo agent for bench/throughput.py: capability ``echo`` (payload
unchanged) and ``spin`` (holds the CPU for the given seconds, in an ``async
def`` that never awaits, or with ``--threads`` in a plain ``def`` on the
thread pool)."""

from __future__ import annotations

import argparse
import asyncio
import time

from agentreach import Agent


def spin(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return "spun"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--id", required=True)
    p.add_argument("--max-concurrent", type=int, default=8)
    p.add_argument("--threads", action="store_true", help="spin in plain def handlers on threads")
    args = p.parse_args()
    agent = Agent(args.server, type="pyecho", id=args.id, max_concurrent=args.max_concurrent)

    @agent.handler("echo")
    async def echo(ctx, payload: bytes) -> bytes:
        return payload

    if args.threads:
        agent.handle("spin", lambda ctx, seconds: spin(seconds))
    else:
        async def spin_async(ctx, seconds: float) -> str:
            return spin(seconds)

        agent.handle("spin", spin_async)
    asyncio.run(agent.run())


if __name__ == "__main__":
    main()
