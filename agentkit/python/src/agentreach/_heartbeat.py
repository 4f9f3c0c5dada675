"""The heartbeat: the agent record put every TTL / 3, from a thread of its own.

It runs its own event loop on its own thread with its own NATS connection,
so neither task traffic nor handlers that hold the agent's event loop (CPU
work in an ``async def``) delay it: the thread needs only the interpreter's
lock, which Python hands round every few milliseconds.

As agentkit's (registry/heartbeat.go): a put that fails is retried after a
jittered fraction of a second (retry_delay) rather than a whole interval
later, and after a reconnect the record is put again within a jittered
quarter interval, so a record that expired while the store was unavailable
is back within moments of the store answering.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
from typing import Any, Callable, Coroutine, Optional, TypeVar

import nats
from nats.aio.client import Client as NATS

from ._connection import dial
from ._wire import BUCKET_AGENTS

log = logging.getLogger("agentreach")
T = TypeVar("T")


class Heartbeat:
    """Heartbeat puts one agent record into REACH_AGENTS, one put at a time.

    ``record`` is called on the heartbeat thread for each put and returns
    the record as it is now (status, active); ``heartbeat_ms`` is added.
    """

    def __init__(self, agent_id: str, servers: list[str], connect: dict[str, Any],
                 record: Callable[[], dict[str, Any]]):
        self._id = agent_id
        self._servers = servers
        self._connect = connect
        self._record = record
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"agentreach-heartbeat-{agent_id}",
                                        daemon=True)
        self._nc: Optional[NATS] = None
        self._kv: Any = None
        self._lock: Optional[asyncio.Lock] = None
        self._due = 0.0  # loop time of the next beat
        self._moved: Optional[asyncio.Event] = None  # set when a reconnect moves _due
        self._beat: Optional[asyncio.Task[None]] = None
        self._closed = False
        self.heartbeat_ms = 0
        self.puts = 0
        self.failures = 0

    def _call(self, coro: Coroutine[Any, Any, T]) -> "asyncio.Future[T]":
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def open(self) -> int:
        """Connects, opens REACH_AGENTS and reads its TTL; returns heartbeat_ms."""
        self._thread.start()
        try:
            return await self._call(self._open())
        except BaseException:
            await self.close()
            raise

    async def _open(self) -> int:
        self._lock = asyncio.Lock()
        self._moved = asyncio.Event()
        self._nc = await dial(self._servers, reconnected=self._reconnected, **self._connect)
        js = self._nc.jetstream()
        try:
            self._kv = await js.key_value(BUCKET_AGENTS)
            status = await self._kv.status()
        except nats.js.errors.NotFoundError as e:
            raise RuntimeError(f"the {BUCKET_AGENTS} bucket is missing (is the topology provisioned? "
                               "`agentreach up` or a dispatcher creates it)") from e
        ttl = status.ttl
        if not ttl or ttl <= 0:
            raise RuntimeError(f"the {BUCKET_AGENTS} bucket has no TTL, so there is no heartbeat to keep")
        self.heartbeat_ms = int(round(ttl * 1000)) // 3
        if self.heartbeat_ms < 100:
            raise RuntimeError(f"the {BUCKET_AGENTS} TTL of {ttl}s gives a heartbeat below 100 ms")
        return self.heartbeat_ms

    async def put(self) -> None:
        """Puts the record as it is now and waits for the bucket to store it."""
        await self._call(self._put())

    async def _put(self) -> None:
        assert self._lock is not None
        async with self._lock:  # a newer record is never overtaken by an older one
            rec = self._record()
            rec["heartbeat_ms"] = self.heartbeat_ms
            await self._kv.put(self._id, json.dumps(rec, separators=(",", ":")).encode())
            self.puts += 1

    def start(self) -> None:
        """Starts putting the record every heartbeat_ms."""
        self._loop.call_soon_threadsafe(self._start_beat)

    def _start_beat(self) -> None:
        self._beat = self._loop.create_task(self._run())

    async def _run(self) -> None:
        assert self._moved is not None
        interval = self.heartbeat_ms / 1000.0
        self._due = self._loop.time() + interval
        failed = 0  # puts failed in a row
        while True:
            left = self._due - self._loop.time()
            if left > 0:
                self._moved.clear()
                try:
                    await asyncio.wait_for(self._moved.wait(), left)
                except asyncio.TimeoutError:
                    pass
                continue
            assert self._nc is not None
            ok = False
            err: Optional[Exception] = None  # the failed put's; none while disconnected
            if not self._nc.is_connected:  # reconnecting: the connection logs each attempt
                self.failures += 1
            else:
                try:
                    await asyncio.wait_for(self._put(), put_timeout(interval))
                    ok = True
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self.failures += 1
                    err = e
            now = self._loop.time()
            if ok:
                if failed:
                    log.info("heartbeat stored again agent=%s failed_puts=%d", self._id, failed)
                failed = 0
                self._due += interval
                if self._due < now:  # stalled past a beat: put again at once, then on the interval
                    self._due = now
                continue
            failed += 1
            delay = retry_delay(interval)
            if err is not None:  # the first of a run of failures is a warning, the next ones detail
                log.log(logging.WARNING if failed == 1 else logging.DEBUG,
                        "heartbeat failed agent=%s failures=%d retry_in=%.3fs error=%r",
                        self._id, failed, delay, err)
            self._due = now + delay

    async def _reconnected(self) -> None:
        """Puts the record within a random share of a quarter interval (at
        most 1 s) of a reconnect: every agent of a restarted server
        reconnects at once, and each puts then, not all together and not a
        whole interval late (its record may have expired meanwhile)."""
        assert self._moved is not None
        if not self.heartbeat_ms:  # still opening: the first beat is the put at start
            return
        self._due = self._loop.time() + random.random() * min(self.heartbeat_ms / 4000.0, 1.0)
        self._moved.set()

    async def stop(self, delete: bool) -> None:
        """Stops beating and, with delete, deletes the record (a KV delete)."""
        try:
            await self._call(self._stop(delete))
        finally:
            await self.close()

    async def _stop(self, delete: bool) -> None:
        if self._beat is not None:
            self._beat.cancel()
            try:
                await self._beat
            except asyncio.CancelledError:
                pass
        if delete and self._kv is not None:
            assert self._lock is not None
            async with self._lock:
                await self._kv.delete(self._id)

    async def close(self) -> None:
        """Closes the connection and ends the thread; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            try:
                await self._call(self._close())
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                await asyncio.to_thread(self._thread.join)
        self._loop.close()

    async def _close(self) -> None:
        if self._beat is not None and not self._beat.done():
            self._beat.cancel()
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()


def put_timeout(interval: float) -> float:
    """Bounds one put: a fifth of the interval, between 250 ms and 1 s, so a
    put lost on a connection that stalled (a route waiting on TCP
    retransmission after a link came back) is sent again within a second."""
    return min(max(interval / 5, 0.25), 1.0)


def retry_step(interval: float) -> float:
    """A twentieth of the interval, between 50 and 250 ms: at most four puts
    a second while the store takes none (a store without a leader answers
    each at once, "no responders")."""
    return min(max(interval / 20, 0.05), 0.25)


def retry_delay(interval: float) -> float:
    """The wait before the next put after failed ones: drawn at random from
    the upper half of retry_step, so agents that failed together do not
    retry together.

    It does not back off. After a partition heals, a JetStream group whose
    replica was cut off has its leader step down within about a second, and
    the next leader comes only after NATS's election timeout (4-9 s): an
    agent whose record expired gets it back at once only if a put lands in
    that first second, which a retry every 125-250 ms does and a backoff to
    a second mostly does not (docs/operations.md, the chaos suite's
    minority partition)."""
    step = retry_step(interval)
    return step / 2 + random.random() * step / 2
