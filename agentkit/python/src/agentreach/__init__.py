"""agentreach: the Python SDK of Agent-Reach, on nats-py.

Serve capabilities with :class:`Agent`, call them with :class:`Client`::

    from agentreach import Agent

    agent = Agent("nats://127.0.0.1:4222", type="inventory")

    @agent.handler("inventory.query")
    async def query(ctx, payload: dict):
        return {"sku": payload["sku"], "stock": 7}

    asyncio.run(agent.run())

The wire protocol is docs/protocol.md; ``python -m agentreach.conformance``
is the agent the conformance suite holds to it.
"""

from ._wire import JSON, MSGPACK, idempotency_bucket_key
from .agent import ACK_DELAY, Agent, Context
from .client import Branch, BranchResult, Client, Gathered, Result
from .errors import (ERRORS, AgentReachError, BadRequest, BizReject, Busy, Cancelled, CircuitOpen, ConnectError,
                     DeadlineExceeded, Incomplete, Internal, InvalidConfig, LoopDetected, NoAgent, NoResult,
                     Overloaded, Parked, PayloadTooLarge, ReachError, Reject, TargetBusy, Timeout, Unauthorized,
                     UnknownCode, from_code)

__version__ = "0.1.0"

__all__ = [
    "ACK_DELAY", "ERRORS", "JSON", "MSGPACK", "Agent", "AgentReachError", "BadRequest", "BizReject", "Branch",
    "BranchResult", "Busy", "Cancelled", "CircuitOpen", "Client", "ConnectError", "Context", "DeadlineExceeded",
    "Gathered", "Incomplete", "Internal", "InvalidConfig", "LoopDetected", "NoAgent", "NoResult", "Overloaded",
    "Parked", "PayloadTooLarge", "ReachError", "Reject", "Result", "TargetBusy", "Timeout", "Unauthorized",
    "UnknownCode", "from_code", "idempotency_bucket_key",
]
