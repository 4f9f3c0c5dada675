"""The stack the tests run against: ``bin/agentreach up`` on a free loopback
port with a temporary data dir, a 1 s heartbeat and a 128 KiB max_payload.

No mocks: every test talks to a real nats-server and a real dispatcher.
Set AGENTREACH_BIN to use another binary than <repo>/bin/agentreach.
"""

from __future__ import annotations

import asyncio
import os
import re
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, TypeVar

import msgpack
import nats
import pytest
import pytest_asyncio

from agentreach import Agent, Client, NoAgent, PayloadTooLarge

REPO = Path(__file__).resolve().parents[3]
MAX_PAYLOAD = 128 * 1024
HEARTBEAT = 1.0  # seconds: REACH_AGENTS has a TTL of 3 s
WAIT = 10.0  # seconds: the safety bound of every poll
BINARY = Path(os.environ.get("AGENTREACH_BIN", REPO / "bin" / "agentreach"))
T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    """Stack is one ``agentreach up`` process: its URL and how to stop it.
    halt and start stop and start it again on the same port and data dir."""

    def __init__(self, *extra: str) -> None:
        if not BINARY.exists():
            pytest.fail(f"{BINARY} is missing: run `make build` first (or set AGENTREACH_BIN)")
        self._dir = tempfile.TemporaryDirectory(prefix="agentreach-py-")
        self.port = _free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.log = open(Path(self._dir.name) / "up.log", "w+")
        self.data = Path(self._dir.name) / "data"
        self._extra = extra
        self.proc: Optional[subprocess.Popen[str]] = None
        self.start()

    def start(self) -> None:
        """Starts up and returns once its dispatcher runs."""
        self.proc = subprocess.Popen(
            [str(BINARY), "up", "--nats-listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data),
             "--heartbeat", f"{int(HEARTBEAT * 1000)}ms", "--max-payload", str(MAX_PAYLOAD), "--http", "off",
             *self._extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        if not self._wait_banner(30.0):
            self.stop()
            pytest.fail(f"agentreach up was not up within 30s: {self.logs()}")

    def _wait_banner(self, timeout: float) -> bool:
        """Waits for the banner up prints once its dispatcher runs."""
        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            end = time.monotonic() + timeout
            while (left := end - time.monotonic()) > 0:
                if not sel.select(left):
                    return False
                line = self.proc.stdout.readline()
                if not line:  # it exited
                    return False
                if line.startswith("Agent-Reach is up."):
                    return True
        return False

    def logs(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def halt(self) -> None:
        """Stops up (SIGTERM, then SIGKILL after 20 s), keeping its data dir."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.proc = None

    def stop(self) -> None:
        self.halt()
        self.log.close()
        self._dir.cleanup()


@pytest.fixture(scope="session")
def stack() -> Any:
    s = Stack()
    yield s
    s.stop()


@pytest_asyncio.fixture(scope="session")
async def nc(stack: Stack) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(stack.url, name="pytest")
    yield conn
    await conn.close()


@pytest_asyncio.fixture(scope="session")
async def client(nc: nats.NATS) -> Client:
    return Client(nc)


@pytest_asyncio.fixture(scope="session")
async def json_client(nc: nats.NATS) -> Client:
    return Client(nc, content_type="application/json")


_counter = 0


SIZE_ERROR = re.compile(r"message of (\d+) bytes \((\d+) of headers \+ (\d+) of body\) exceeds the server's "
                        rf"max_payload of {MAX_PAYLOAD} bytes, which counts headers and body")


def header_bytes(e: PayloadTooLarge, body: int, prefix: str = "") -> int:
    """Returns the header bytes e's message names, after checking that it
    is prefix and the size error naming MAX_PAYLOAD, adding up for a body
    of body bytes."""
    m = SIZE_ERROR.fullmatch(e.message.removeprefix(prefix))
    assert m and e.message.startswith(prefix), e.message
    size, hdr, n = map(int, m.groups())
    assert (n, size) == (body, hdr + n)
    return hdr


async def fills_max_payload(c: Client, send: Callable[[bytes], Awaitable[Any]]) -> None:
    """Checks that send (a call or submit on c, of a body) refuses before
    anything is sent a body that fits max_payload only without the headers,
    and one a byte past it with them, naming the same header bytes; and that
    a body filling max_payload exactly with them leaves (send decides what
    the answer must be), c still connected."""
    def body(n: int) -> bytes:  # one msgpack value of n bytes: bin 32, 5 bytes, then the data
        b = msgpack.packb(b"x" * (n - 5))
        assert len(b) == n
        return b

    before = c.nc.stats["out_msgs"]
    with pytest.raises(PayloadTooLarge) as e:
        await send(body(MAX_PAYLOAD - 8))
    hdr = header_bytes(e.value, MAX_PAYLOAD - 8)
    with pytest.raises(PayloadTooLarge) as e:
        await send(body(MAX_PAYLOAD - hdr + 1))
    assert header_bytes(e.value, MAX_PAYLOAD - hdr + 1) == hdr and c.nc.stats["out_msgs"] == before
    await send(body(MAX_PAYLOAD - hdr))
    assert c.nc.stats["out_msgs"] > before and c.nc.is_connected


def unique(base: str) -> str:
    """Returns a capability or type name no other test uses."""
    global _counter
    _counter += 1
    return f"{base}{_counter}"


@asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[Agent]:
    """Starts agent, yields it, and drains it (unless the test did)."""
    await agent.start()
    try:
        yield agent
    finally:
        await agent.drain()


async def poll(cond: Callable[[], Awaitable[Any]], what: str, timeout: float = WAIT) -> Any:
    """Polls cond until it returns something truthy; fails naming what after timeout."""
    end = time.monotonic() + timeout
    while True:
        got = await cond()
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.02)


async def routed(call: Callable[[], Awaitable[T]], timeout: float = WAIT) -> T:
    """Returns what call returns once a dispatcher routes it. A dispatcher
    learns of an agent by its watch of REACH_AGENTS, a moment after the
    agent's start (longer on a loaded machine); until then the call fails
    with NO_AGENT and nothing ran, so it is made again."""
    end = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except NoAgent:
            if time.monotonic() > end:
                raise
        await asyncio.sleep(0.02)


class Direct:
    """Direct plays a dispatcher: deliveries straight to reach.agent.<id>."""

    def __init__(self, nc: nats.NATS, agent_id: str):
        self.nc = nc
        self.agent_id = agent_id

    async def deliver(self, capability: str, body: bytes, content_type: str = "application/json",
                      extra: Optional[dict[str, str]] = None) -> "Replies":
        inbox = self.nc.new_inbox()
        replies = Replies(inbox)
        replies.sub = await self.nc.subscribe(inbox, cb=replies.put)
        rid = f"direct-{time.monotonic_ns()}"
        h = {"Reach-Capability": capability, "Reach-Request-Id": rid, "Reach-Orchestration-Id": rid,
             "Reach-Attempt": "1", "Reach-Hops": "1", "Reach-Visits": self.agent_id,
             "Reach-Deadline": str(int((time.time() + 30) * 1000)), "Content-Type": content_type}
        h.update(extra or {})
        await self.nc.publish(f"reach.agent.{self.agent_id}", body, reply=inbox, headers=h)
        await self.nc.flush()
        return replies


class Replies:
    """Replies collects what an agent answered one direct delivery."""

    def __init__(self, inbox: str):
        self.inbox = inbox
        self.msgs: list[Any] = []
        self.sub: Any = None
        self._event = asyncio.Event()

    async def put(self, msg: Any) -> None:
        self.msgs.append(msg)
        self._event.set()

    def statuses(self) -> list[str]:
        return [m.headers.get("Reach-Status", "") for m in self.msgs]

    async def final(self, timeout: float = WAIT) -> Any:
        """Returns the final reply (FINISHED, FAILED or TIMEOUT)."""
        end = time.monotonic() + timeout
        while True:
            for m in self.msgs:
                if m.headers.get("Reach-Status") in ("FINISHED", "FAILED", "TIMEOUT"):
                    await self.sub.unsubscribe()
                    return m
            left = end - time.monotonic()
            if left <= 0:
                pytest.fail(f"no final reply within {timeout}s; saw {self.statuses()}")
            self._event.clear()
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except asyncio.TimeoutError:
                pass


def python() -> str:
    """Returns the interpreter running the tests (the venv's)."""
    return sys.executable
