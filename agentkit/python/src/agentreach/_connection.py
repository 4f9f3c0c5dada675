"""Connections: the first dial tries each server once, then reconnects forever.

nats-py's own ``connect`` retries the first dial 60 times, two seconds
apart, and its default error callback logs a traceback for every attempt.
Here, as with the Go CLI and nats.go, the first dial tries each server once
within the connect timeout and fails with :class:`ConnectError`; once
connected, the connection reconnects forever and logs one line per event:
``nats disconnected``, ``nats reconnect failed`` (one per attempt, numbered),
``nats reconnected``, and ``nats error`` for any other asynchronous error
(a permissions violation, a slow consumer).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Optional, Union

import nats.errors
from nats.aio.client import Client as NATS

from .errors import ConnectError

log = logging.getLogger("agentreach")

DEFAULT_CONNECT_TIMEOUT = 5.0
"""DEFAULT_CONNECT_TIMEOUT bounds the first dial to all the servers together (seconds)."""

RECONNECT_WAIT = 2
"""RECONNECT_WAIT is the pause between two reconnect attempts to one server (seconds)."""


class _GiveUp(Exception):
    """_GiveUp ends the first dial once every server has refused it."""


def _describe(e: BaseException) -> str:
    return str(e) or e.__class__.__name__


class _Events:
    """_Events logs what happens to one connection, one line per event, and
    stops its first dial after one failure per server."""

    def __init__(self, nc: NATS, name: str, servers: int, on_reconnect: Optional[Callable[[], Awaitable[None]]]):
        self.nc = nc
        self.name = name
        self.servers = servers
        self.on_reconnect = on_reconnect
        self.dialling = True
        self.failures: list[str] = []  # the first dial's, one per server tried
        self.lost = ""  # why the connection was lost, for the disconnected line
        self.attempt = 0  # reconnect attempts since the connection was lost

    async def error(self, e: Exception) -> None:
        if self.dialling:
            self.failures.append(_describe(e))
            if len(self.failures) >= self.servers:
                raise _GiveUp()
        elif self.nc.is_reconnecting:
            self.attempt += 1
            log.warning("nats reconnect failed conn=%r attempt=%d error=%s", self.name, self.attempt, _describe(e))
        elif isinstance(e, nats.errors.StaleConnectionError):  # the server went away: a disconnect follows
            self.lost = _describe(e)
        else:
            log.warning("nats error conn=%r error=%s", self.name, _describe(e))

    async def disconnected(self) -> None:
        if self.dialling or self.nc.is_closed:
            return
        self.attempt = 0
        log.warning("nats disconnected conn=%r error=%s, reconnecting every %gs", self.name,
                    self.lost or "connection lost", RECONNECT_WAIT)
        self.lost = ""

    async def reconnected(self) -> None:
        url = self.nc.connected_url
        log.info("nats reconnected conn=%r server=%s after %d failed attempts", self.name,
                 url.geturl() if url else "", self.attempt)
        self.attempt = 0
        if self.on_reconnect is not None:
            await self.on_reconnect()


def server_list(servers: Union[str, list[str]]) -> list[str]:
    """Returns the server URLs of a URL, a comma-separated list of them, or a list."""
    urls = servers.split(",") if isinstance(servers, str) else servers
    return [u.strip() for u in urls if u.strip()]


async def dial(servers: Union[str, list[str]], *, name: str, timeout: float = DEFAULT_CONNECT_TIMEOUT,
               reconnected: Optional[Callable[[], Awaitable[None]]] = None, **options: Any) -> NATS:
    """Connects to servers (a URL, a comma-separated list or a list),
    trying each once, all within timeout seconds; raises ConnectError.
    options are nats-py's connect options (credentials, TLS, inbox prefix);
    the connection's callbacks, reconnect policy and name are set here.
    reconnected, if given, is awaited after each reconnect is logged."""
    urls = server_list(servers)
    shown = ",".join(urls)
    if not urls:
        raise ConnectError("connect: no server URL given")
    if timeout <= 0:
        raise ConnectError(f"connect to {shown}: the connect timeout must be positive, got {timeout!r}")
    nc = NATS()
    events = _Events(nc, name, len(urls), reconnected)
    try:
        await asyncio.wait_for(
            nc.connect(urls, name=name, allow_reconnect=True, max_reconnect_attempts=-1,
                       reconnect_time_wait=RECONNECT_WAIT, error_cb=events.error, disconnected_cb=events.disconnected,
                       reconnected_cb=events.reconnected, **{**options, "connect_timeout": timeout}),
            timeout)
    except BaseException as e:
        events.dialling = False
        await nc.close()
        if isinstance(e, _GiveUp):
            raise ConnectError(f"connect to {shown}: {'; '.join(events.failures)}") from None
        if isinstance(e, asyncio.TimeoutError):
            tried = f" ({'; '.join(events.failures)})" if events.failures else ""
            raise ConnectError(f"connect to {shown}: no connection within {timeout:g}s{tried}") from None
        if isinstance(e, Exception):  # a malformed URL or option
            raise ConnectError(f"connect to {shown}: {_describe(e)}") from e
        raise
    events.dialling = False
    return nc


async def flush(nc: NATS) -> None:
    """Returns once the server has every command written on nc before the call.

    nats-py's own flush writes its PING to the socket at once, ahead of the
    commands still in its pending buffer: a SUB made just before waits there
    for the flusher task, so the PONG can come back before the server has the
    subscription (a dispatcher that then delivers gets no responders). The
    flusher was woken before that first PING went out, so by the time its
    PONG is read the pending commands are on the socket, and a second PING
    follows them."""
    await nc.flush()
    await nc.flush()
