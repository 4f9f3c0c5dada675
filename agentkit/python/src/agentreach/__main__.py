"""``python -m agentreach call <capability> '<json>'``: a quick call from the shell.

The result is printed as JSON on stdout (exit 0); an error as one line
``{"code","message"}`` on stderr (exit 1): a wire code, or ``CONNECT`` when
no server took the connection within the connect timeout (5 s), as with
``agentreach call``; a usage error exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any, Optional

from ._wire import JSON
from .client import Client
from .errors import ConnectError, ReachError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agentreach", description="Call Agent-Reach capabilities.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("call", help="call a capability and print its result")
    c.add_argument("capability", help="the capability, e.g. inventory.query")
    c.add_argument("payload", nargs="?", default="null", help="the payload as JSON (default null); - reads stdin")
    c.add_argument("--server", default=os.environ.get("AGENTREACH_SERVER", "nats://127.0.0.1:4222"),
                   help="NATS URL (default $AGENTREACH_SERVER or nats://127.0.0.1:4222)")
    c.add_argument("--prefix", default=os.environ.get("AGENTREACH_PREFIX", "reach"), help="subject prefix")
    c.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (default 30)")
    c.add_argument("--agent", default="", help="unicast: this instance only")
    c.add_argument("--idempotency-key", default="", help="execute at most once under this key")
    return p


async def _call(args: argparse.Namespace, payload: Any) -> Any:
    client = await Client.connect(args.server, content_type=JSON, prefix=args.prefix)
    try:
        res = await client.call(args.capability, payload, timeout=args.timeout, agent=args.agent,
                                idempotency_key=args.idempotency_key)
        return res.value
    finally:
        await client.close()


def main(argv: Optional[list[str]] = None) -> int:
    """Runs the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    raw = sys.stdin.read() if args.payload == "-" else args.payload
    try:
        payload = json.loads(raw)
    except ValueError as e:
        print(f"payload: not valid JSON: {e}", file=sys.stderr)
        return 2
    try:
        out = asyncio.run(_call(args, payload))
    except ReachError as e:
        print(json.dumps({"code": e.code, "message": e.message}), file=sys.stderr)
        return 1
    except ConnectError as e:
        print(json.dumps({"code": e.code, "message": str(e)}), file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
