"""Identities under `agentreach up --auth`: a Python caller and a Python
agent connect with their credentials and sign what they send; the
dispatcher accepts their Reach-Source, refuses an unsigned task and a
cancel from another identity stops nothing; the bearer token derived here
is the one `agentreach auth token` prints."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any, AsyncIterator

import nats
import pytest
import pytest_asyncio
from conftest import BINARY, WAIT, Stack, fills_max_payload, poll, routed, unique

from agentreach import JSON, Agent, Client, InvalidConfig, NoAgent, NoResult, Unauthorized
from agentreach.auth import Credentials, InvalidCredentials, Signer


def auth(stack: Stack, *args: str) -> str:
    out = subprocess.run([str(BINARY), "auth", "--dir", str(stack.data / "auth"), *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def creds(stack: Stack, name: str) -> str:
    return str(stack.data / "auth" / "creds" / f"{name}.creds")


@pytest.fixture(scope="module")
def secure() -> Any:
    s = Stack("--auth", "--demo")
    auth(s, "caller", "py-caller")
    auth(s, "caller", "py-other")
    auth(s, "agent", "py-echo-1", "--type", "pyecho")
    yield s
    s.stop()


async def synced(stack: Stack, name: str) -> None:
    """Returns once identity name can connect: the running stack syncs a new
    identity to the server within about a second."""
    async def attempt() -> Any:
        try:
            return await nats.connect(stack.url, allow_reconnect=False,
                                      **Credentials.load(creds(stack, name)).connect_options())
        except (nats.errors.Error, OSError, asyncio.TimeoutError):
            return None
    nc = await poll(attempt, f"{name} connects once synced")
    await nc.close()


@pytest_asyncio.fixture
async def caller(secure: Stack) -> AsyncIterator[Client]:
    await synced(secure, "py-caller")
    c = await Client.connect(secure.url, credentials=creds(secure, "py-caller"), content_type=JSON)
    yield c
    await c.close()


async def test_a_signed_caller_is_accepted_and_an_unsigned_task_refused(secure: Stack, caller: Client) -> None:
    res = await routed(lambda: caller.call("echo", {"text": "hi"}, timeout=5))
    assert res.decode() == {"text": "hi"}
    unsigned = Client(caller.nc, content_type=JSON)
    with pytest.raises(Unauthorized, match="Reach-Signature"):
        await unsigned.call("echo", {"text": "hi"}, timeout=5)


async def test_the_signature_counts_against_max_payload(secure: Stack, caller: Client) -> None:
    """A signed task's size counts Reach-Source and Reach-Signature, which
    signing adds last: one that fits only unsigned is PAYLOAD_TOO_LARGE
    before it is sent."""
    signed = Client(caller.nc, source=caller.source, signer=caller.signer)  # msgpack, for fills_max_payload
    cap = unique("signed.sized")

    async def call(body: bytes) -> None:
        with pytest.raises(NoAgent):  # the dispatcher answers: nobody serves cap
            await signed.call(cap, body, timeout=WAIT)

    await fills_max_payload(signed, call)


async def test_a_python_agent_serves_as_its_identity(secure: Stack, caller: Client) -> None:
    agent = Agent(secure.url, type="pyecho", id="py-echo-1", credentials=creds(secure, "py-echo-1"))

    @agent.handler("pyecho")
    async def echo(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
        # a call from inside the handler is signed as the agent
        inner = await ctx.call("echo", payload)
        return {"echoed": inner.decode(), "source": ctx.headers.get("Reach-Source")}

    await synced(secure, "py-echo-1")
    await agent.start()
    try:
        res = await routed(lambda: caller.call("pyecho", {"n": 1}, timeout=5))
        assert res.node == "py-echo-1"
        assert res.decode() == {"echoed": {"n": 1}, "source": "py-caller"}
    finally:
        await agent.drain()


async def test_a_python_agent_keeps_idempotent_outcomes_under_its_grant(secure: Stack, caller: Client) -> None:
    """Under auth an agent reads and writes REACH_IDEMPOTENCY only by key, for
    what it serves: the claim (a create), the wait of a second delivery (KV
    gets, no consumer), the stored outcome and its replay all pass."""
    agent = Agent(secure.url, type="pyecho", id="py-echo-1", credentials=creds(secure, "py-echo-1"))
    executions: dict[str, int] = {}

    @agent.handler("pyecho.write")
    async def write(ctx: Any, payload: Any) -> dict[str, int]:
        executions[ctx.idempotency_key] = executions.get(ctx.idempotency_key, 0) + 1
        await asyncio.sleep(0.2)  # the second delivery finds the claim pending
        return {"n": executions[ctx.idempotency_key]}

    await synced(secure, "py-echo-1")
    await agent.start()
    try:
        key = unique("k")
        both = await routed(lambda: asyncio.gather(*(caller.call("pyecho.write", {}, idempotency_key=key, timeout=10)
                                                     for _ in range(2))))
        assert [b.decode() for b in both] == [{"n": 1}, {"n": 1}] and executions[key] == 1
        again = await caller.call("pyecho.write", {}, idempotency_key=key, timeout=10)
        assert again.replayed and again.decode() == {"n": 1} and executions[key] == 1
    finally:
        await agent.drain()


def test_an_agent_refuses_another_identitys_credentials(secure: Stack) -> None:
    with pytest.raises(InvalidConfig, match="not 'py-echo-2'"):
        Agent(secure.url, type="pyecho", id="py-echo-2", credentials=creds(secure, "py-echo-1"))


def test_the_bearer_token_is_the_one_agentreach_prints(secure: Stack) -> None:
    signer = Credentials.load(creds(secure, "py-caller")).signer()
    assert signer.bearer() == auth(secure, "token", "py-caller").strip()
    assert Credentials.load(creds(secure, "py-other")).signer().bearer() != signer.bearer()


def test_unreadable_credentials_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.creds"
    bad.write_text("not a credentials file\n")
    with pytest.raises(InvalidCredentials, match="want a user JWT and a seed block"):
        Credentials.load(str(bad))
    with pytest.raises(InvalidCredentials, match="No such file"):
        Credentials.load(str(tmp_path / "missing.creds"))


async def test_a_cancel_is_signed_and_another_identitys_stops_nothing(secure: Stack, caller: Client) -> None:
    held: dict[str, Any] = {}
    both = asyncio.Event()
    agent = Agent(secure.url, type="pyecho", id="py-echo-1", credentials=creds(secure, "py-echo-1"))

    @agent.handler("pyecho")
    async def hold(ctx: Any, payload: Any) -> Any:
        held[ctx.request_id] = ctx
        if len(held) == 2:
            both.set()
        await asyncio.wait_for(ctx.cancelled.wait(), WAIT)
        return {"cancelled": True}

    await synced(secure, "py-echo-1")
    await agent.start()
    try:
        calls = {rid: asyncio.ensure_future(routed(lambda rid=rid: caller.call("pyecho", {}, timeout=WAIT,
                                                                               request_id=rid)))
                 for rid in ("py-hold-a", "py-hold-b")}
        await asyncio.wait_for(both.wait(), WAIT)
        await synced(secure, "py-other")
        other = await Client.connect(secure.url, credentials=creds(secure, "py-other"))
        try:
            await other._cancel("py-hold-a")  # signed, but by another identity than the task's caller
        finally:
            await other.close()  # flushed: the server passed it on before the cancel below
        calls["py-hold-b"].cancel()  # the caller's own cancel, signed by it
        await asyncio.wait_for(held["py-hold-b"].cancelled.wait(), WAIT)
        # The dispatcher handles cancels in order and the agent its CANCELs:
        # had the other identity's stopped task a, a would be cancelled by now.
        assert not held["py-hold-a"].cancelled.is_set()
        calls["py-hold-a"].cancel()
        await asyncio.wait_for(held["py-hold-a"].cancelled.wait(), WAIT)
        for c in calls.values():
            with pytest.raises(asyncio.CancelledError):
                await c
    finally:
        await agent.drain()


def test_the_submission_id_is_the_go_sdks() -> None:
    """The same keys make the same Nats-Msg-Id as Go's auth.Signer.SubmissionID
    (auth/submission_test.go holds the same values)."""
    signer = Signer("alice", "SUANSZYV4ZOJE7BIYVZQL7ZUTTA45BCPWCJ3M72VMYWJOPXZ5QSUACKKWU",
                    "XBLWJHGXHGVEOGOKKGF6JDLX6P5E6HTSHSA4ZVMPJ6WE44QKSUHR26QB")
    assert signer.submission_id("r1") == "alice.r1.MrGbpXdm25uVjZUbaSfZ-Q"
    assert signer.submission_id("r1") != signer.submission_id("r2")


async def test_a_durable_result_is_read_only_by_its_submitter(secure: Stack, caller: Client) -> None:
    """Under auth a caller reads its own durable result (a direct get of
    reach.result.<name>.<id>, the only read its permissions allow) and
    another identity finds none under the same request id."""
    await routed(lambda: caller.call("echo", {"text": "warm"}, timeout=5))
    rid = await caller.submit("echo", {"text": "durable"})
    assert (await caller.wait(rid, timeout=WAIT)).decode() == {"text": "durable"}
    assert (await poll(lambda: _recorded(caller, rid), "the outcome recorded")).decode() == {"text": "durable"}
    await synced(secure, "py-other")
    other = await Client.connect(secure.url, credentials=creds(secure, "py-other"), content_type=JSON)
    try:
        with pytest.raises(NoResult):
            await other.result(rid)
    finally:
        await other.close()


async def _recorded(client: Client, rid: str) -> Any:
    try:
        return await client.result(rid)
    except NoResult:
        return None
