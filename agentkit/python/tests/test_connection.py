"""Connections: the first dial fails at once with ConnectError (CONNECT on
the command line, as with the Go CLI), and an agent rides out a restart of
its server with one log line per event and no traceback."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import re
import socket
import subprocess
from contextlib import contextmanager
from typing import Iterator

import nats
import pytest
from conftest import BINARY, Stack, poll, python, routed, running, unique

import agentreach._connection
from agentreach import JSON, Agent, AgentReachError, Client, ConnectError

REFUSED = f"[Errno {errno.ECONNREFUSED}]"


@contextmanager
def closed_port() -> Iterator[str]:
    """Yields the URL of a loopback port that refuses connections: bound,
    so no other process takes it, but not listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"nats://127.0.0.1:{s.getsockname()[1]}"


@contextmanager
def mute_port() -> Iterator[str]:
    """Yields the URL of a loopback port that takes connections and never speaks."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"nats://127.0.0.1:{s.getsockname()[1]}"


async def test_the_cli_fails_on_a_closed_port_like_the_go_cli() -> None:
    with closed_port() as url:
        py, go = await asyncio.gather(*(asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True,
                                                          timeout=60)
                                        for cmd in ([python(), "-m", "agentreach", "call", "echo", "{}", "--server", url],
                                                    [str(BINARY), "call", "echo", "{}", "--server", url])))
    assert go.returncode == 1 and go.stderr.startswith(f"error: connect to {url}: "), go.stderr
    assert py.returncode == go.returncode and py.stdout == ""
    assert py.stderr.count("\n") == 1, f"one line, got {py.stderr!r}"
    err = json.loads(py.stderr)
    assert err["code"] == "CONNECT"
    # Refused on the first dial: not after retries, nor at the connect timeout.
    assert err["message"].startswith(f"connect to {url}: {REFUSED} "), err


async def test_client_connect_raises_connect_error() -> None:
    with closed_port() as a, closed_port() as b:
        with pytest.raises(ConnectError) as e:
            await Client.connect(a)
        assert isinstance(e.value, AgentReachError) and isinstance(e.value, ConnectionError)
        assert e.value.code == "CONNECT" and str(e.value).startswith(f"connect to {a}: {REFUSED} ")
        with pytest.raises(ConnectError) as e:  # every server is tried once
            await Client.connect(f"{a}, {b}")
        assert str(e.value).startswith(f"connect to {a},{b}: ") and str(e.value).count(REFUSED) == 2
    with mute_port() as url:
        with pytest.raises(ConnectError, match=f"connect to {url}: "):
            await Client.connect(url, connect_timeout=0.2)


async def test_agent_start_raises_connect_error() -> None:
    with closed_port() as url:
        agent = Agent(url, type="closedtest")
        agent.handle("closed.echo", lambda ctx, p: p)
        with pytest.raises(ConnectError, match=re.escape(f"connect to {url}: {REFUSED} ")):
            await agent.start()


EVENT = re.compile(r"^nats (disconnected|reconnect failed|reconnected) conn='([^']*)'(?: attempt=(\d+))?")


async def test_an_agent_rides_out_a_restart_of_its_server(caplog: pytest.LogCaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(agentreach._connection, "RECONNECT_WAIT", 0.25)  # several attempts while up restarts
    cap = unique("restart.echo")
    stack = Stack()
    try:
        agent = Agent(stack.url, type="restarttest")
        agent.handle(cap, lambda ctx, p: p)
        conns = (f"agentreach {agent.id}", f"agentreach {agent.id} heartbeat")
        client = await Client.connect(stack.url, content_type=JSON)
        try:
            async with running(agent):
                assert (await routed(lambda: client.call(cap, 1, timeout=5))).value == 1

                def events(kind: str) -> dict[str, list[str]]:
                    seen: dict[str, list[str]] = {c: [] for c in conns}
                    for r in caplog.records:
                        m = EVENT.match(r.getMessage())
                        if m and m[1] == kind and m[2] in seen:
                            seen[m[2]].append(m[3] or "")
                    return seen

                await asyncio.to_thread(stack.halt)
                await poll(lambda: asyncio.sleep(0, all(events("reconnect failed").values())),
                           "a failed reconnect attempt of each connection")
                await asyncio.to_thread(stack.start)
                await poll(lambda: asyncio.sleep(0, all(events("reconnected").values()) and client.nc.is_connected),
                           "every connection back")
                assert (await routed(lambda: client.call(cap, 2, timeout=5))).value == 2
        finally:
            await client.close()
    finally:
        stack.stop()
    for r in caplog.records:
        assert r.exc_info is None and "\n" not in r.getMessage(), f"one line, no traceback: {r.getMessage()}"
        assert r.name == "agentreach", f"{r.name} logged {r.getMessage()!r}"
    for conn in conns:
        attempts = events("reconnect failed")[conn]
        assert attempts == [str(n) for n in range(1, len(attempts) + 1)], f"{conn}: one line per attempt"
        assert len(events("disconnected")[conn]) == len(events("reconnected")[conn]) == 1, conn
        said = [r.getMessage() for r in caplog.records if f"conn='{conn}'" in r.getMessage()]
        assert len(said) == len(attempts) + 2, f"{conn}: nothing but these events: {said}"


class _Recorder:
    """A stub NATS server's log: the subscriptions it had when it answered each PING."""

    def __init__(self) -> None:
        self.subs: list[str] = []
        self.at_pong: list[list[str]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'INFO {"server_id":"stub","version":"2.12.0","proto":1,"headers":true,"max_payload":1048576}\r\n')
        while line := await reader.readline():
            op = line.split(b" ", 1)[0].strip().upper()
            if op == b"SUB":
                self.subs.append(line.split()[1].decode())
            elif op == b"PING":
                self.at_pong.append(list(self.subs))
                writer.write(b"PONG\r\n")
                await writer.drain()
        writer.close()


async def test_flush_returns_once_the_server_has_the_subscription():
    """An agent puts its record once its subscription is at the server. nats-py's
    flush writes its PING ahead of a SUB still in its pending buffer, so the
    PONG can answer before the server has it (the control); agentreach's flush
    returns only once the server had the subscription when it answered."""
    rec = _Recorder()
    server = await asyncio.start_server(rec.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    try:
        await nc.subscribe("reach.agent.control")
        await nc.flush()
        assert rec.at_pong[-1] == [], f"the control: nats-py's flush now waits for a pending SUB ({rec.at_pong})"
        await nc.subscribe("reach.agent.a-1")
        await agentreach._connection.flush(nc)
        assert "reach.agent.a-1" in rec.at_pong[-1], rec.at_pong
    finally:
        await nc.close()
        server.close()
        await server.wait_closed()
