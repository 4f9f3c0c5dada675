"""The NATS micro protocol for an agent (docs/protocol.md, NATS micro).

An agent answers ``$SRV.PING``, ``$SRV.INFO`` and ``$SRV.STATS`` (and their
``.<name>`` and ``.<name>.<id>`` forms) so that ``nats micro ls``, ``info``
and ``stats`` list it: the service name is the agent type and each endpoint
one capability, with ``.`` written as ``_``; every endpoint's subject is the
instance's delivery subject, its metadata ``{"capability": <name>}``; the
statistics are counted as tasks run. Five subscriptions for the whole
service, none per capability.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Optional

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

_TYPES = {"PING": "io.nats.micro.v1.ping_response", "INFO": "io.nats.micro.v1.info_response",
          "STATS": "io.nats.micro.v1.stats_response"}


# What the micro protocol's tools accept as a version (the nats CLI refuses an answer with another).
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
                     r"(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")


def name(s: str) -> str:
    """The micro name of an agent type or capability: '.' as '_'."""
    return s.replace(".", "_")


class _Counter:
    __slots__ = ("requests", "errors", "nanos", "last_error")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.nanos = 0
        self.last_error = ""


class Service:
    """Service answers the micro protocol for one agent instance."""

    def __init__(self, agent_type: str, id: str, version: str, description: str, subject: str,
                 capabilities: list[str]) -> None:
        self._type, self._id, self._version, self._description = agent_type, id, version, description
        self._name = name(agent_type)
        self._subject = subject
        self._caps = sorted(capabilities)
        self._stats = {c: _Counter() for c in self._caps}
        self._started = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        self._subs: list[Any] = []

    def count(self, capability: str, seconds: float, error: str) -> None:
        """Adds one request of capability that took seconds, failed with
        error when it is not ""."""
        c = self._stats.get(capability)
        if c is None:
            return
        c.requests += 1
        c.nanos += int(seconds * 1e9)
        if error:
            c.errors += 1
            c.last_error = error

    async def start(self, nc: NATS) -> None:
        srv = f"$SRV.*.{self._name}"
        for subject in ("$SRV.PING", "$SRV.INFO", "$SRV.STATS", srv, f"{srv}.{self._id}"):
            self._subs.append(await nc.subscribe(subject, cb=self._answer))

    async def stop(self) -> None:
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception:  # the connection is closing: the subscription goes with it
                pass
        self._subs = []

    async def _answer(self, msg: Msg) -> None:
        if not msg.reply:
            return
        verb = msg.subject.split(".")[1]
        body = self.response(verb)
        if body is not None:
            await msg.respond(json.dumps(body).encode())

    def response(self, verb: str) -> Optional[dict[str, Any]]:
        """The answer to verb (PING, INFO or STATS); None for another."""
        kind = _TYPES.get(verb)
        if kind is None:
            return None
        meta = {"type": self._type}
        version = self._version
        if not _SEMVER.match(version):  # "dev": 0.0.0, the version as given in the metadata
            meta["version"], version = version, "0.0.0"
        out: dict[str, Any] = {"name": self._name, "id": self._id, "version": version, "metadata": meta, "type": kind}
        if verb == "INFO":
            out["description"] = self._description
            out["endpoints"] = [{"name": name(c), "subject": self._subject, "queue_group": "",
                                 "metadata": {"capability": c}} for c in self._caps]
        elif verb == "STATS":
            out["started"] = self._started
            eps = []
            for c in self._caps:
                n = self._stats[c]
                eps.append({"name": name(c), "subject": self._subject, "queue_group": "",
                            "num_requests": n.requests, "num_errors": n.errors, "last_error": n.last_error,
                            "processing_time": n.nanos,
                            "average_processing_time": n.nanos // n.requests if n.requests else 0})
            out["endpoints"] = eps
        return out
