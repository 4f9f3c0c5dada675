"""An inventory agent: serves ``inventory.query`` and ``inventory.reserve``.

    make run                                         # in one terminal: the stack
    .venv/bin/python agentkit/python/examples/inventory.py
    .venv/bin/python -m agentreach call inventory.query '{"sku": "iphone-15-pro-max-256"}'

AGENTREACH_SERVER names the NATS server (default nats://127.0.0.1:4222);
without one it exits 1 with one line, the ConnectError.
Ctrl-C drains it: running tasks finish, then the agent deregisters.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from dataclasses import dataclass

from agentreach import Agent, BadRequest, ConnectError, Context, Reject

STOCK = {"iphone-15-pro-max-256": 12, "pixel-9": 0}


@dataclass
class Query:
    sku: str


@dataclass
class Reservation:
    sku: str
    qty: int = 1


agent = Agent(os.environ.get("AGENTREACH_SERVER", "nats://127.0.0.1:4222"), type="inventory",
              max_concurrent=16, weight=60,
              declaration={"description": "Stock per SKU",
                           "capabilities": [
                               {"name": "inventory.query", "mode": "read", "idempotent": True, "timeout_ms": 4000,
                                "input_schema": {"type": "object", "required": ["sku"]}},
                               {"name": "inventory.reserve", "mode": "write", "timeout_ms": 4000}]})


@agent.handler("inventory.query")
async def handle_inventory_query(ctx: Context, q: Query) -> dict:
    # ctx carries what ties this task to its chain: log it with your own lines.
    logging.info("query sku=%s request_id=%s orchestration_id=%s source=%s", q.sku, ctx.request_id,
                 ctx.orchestration_id, ctx.source or "-")
    if q.sku not in STOCK:
        raise Reject(f"unknown sku {q.sku!r}")
    return {"sku": q.sku, "stock": STOCK[q.sku], "currency": "CNY"}


@agent.handler("inventory.reserve")
async def handle_reserve(ctx: Context, r: Reservation) -> dict:
    if r.qty < 1:
        raise BadRequest("qty must be at least 1")
    if STOCK.get(r.sku, 0) < r.qty:
        raise Reject(f"only {STOCK.get(r.sku, 0)} of {r.sku!r} left")
    STOCK[r.sku] -= r.qty  # a write: the dispatcher's --writes gives it an idempotency key
    return {"sku": r.sku, "reserved": r.qty, "left": STOCK[r.sku]}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        asyncio.run(agent.run())
    except ConnectError as e:
        sys.exit(f"inventory: {e}")
