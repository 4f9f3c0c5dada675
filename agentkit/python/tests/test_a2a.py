"""The gateway's A2A 1.0 binding called by the official A2A Python client
(a2a-sdk, pinned in constraints.txt), and the NATS micro protocol answered
by a Python agent. The stack is ``agentreach up`` with its HTTP gateway on;
the agents are this SDK's.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import nats
import pytest
import pytest_asyncio
from a2a.client import ClientConfig, create_client
from a2a.client.errors import A2AClientError
from a2a.helpers import new_text_message
from a2a.types import CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError
from google.protobuf import json_format, struct_pb2

from agentreach import Agent, Context, Reject

from conftest import REPO, WAIT, Stack, _free_port, poll, running


@pytest.fixture(scope="module")
def web() -> Any:
    port = _free_port()
    s = Stack("--http", f"127.0.0.1:{port}")
    s.http = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield s
    s.stop()


@pytest_asyncio.fixture(scope="module")
async def agents(web: Stack) -> AsyncIterator[Agent]:
    """Type "a2a.tools": a2a.echo answers its payload, a2a.refuse rejects,
    a2a.slow waits until cancelled; type "a2a-echo" serves a2a-echo; type
    "a2a-story" serves a2a-story, which streams the words of its text."""
    tools = Agent(web.url, type="a2a.tools", id="a2a-tools-1", version="1.4.0",
                  declaration={"type": "a2a.tools", "description": "tools for the A2A tests", "capabilities": [
                      {"name": "a2a.echo", "description": "answers its input", "input_schema": {"type": "object"}},
                      {"name": "a2a.refuse"}, {"name": "a2a.slow"}]})

    @tools.handler("a2a.echo")
    async def echo(ctx: Context, payload: Any) -> Any:
        return payload

    @tools.handler("a2a.refuse")
    async def refuse(ctx: Context, payload: Any) -> Any:
        raise Reject("not on a Sunday")

    @tools.handler("a2a.slow")
    async def slow(ctx: Context, payload: Any) -> Any:
        await asyncio.wait_for(ctx.cancelled.wait(), WAIT * 3)
        return {"cancelled": True}

    solo = Agent(web.url, type="a2a-echo", id="a2a-echo-1")

    @solo.handler("a2a-echo")
    async def solo_echo(ctx: Context, payload: Any) -> Any:
        return payload

    story = Agent(web.url, type="a2a-story", id="a2a-story-1")

    @story.handler("a2a-story")
    async def tell(ctx: Context, payload: Any) -> AsyncIterator[str]:
        for word in str(payload["text"]).split():
            yield word + " "

    async with running(tools), running(solo), running(story):
        async with httpx.AsyncClient() as h:
            async def routable() -> bool:
                for t in ("a2a.tools", "a2a-echo", "a2a-story"):
                    r = await h.get(f"{web.http}/a2a/{t}/.well-known/agent-card.json")  # type: ignore[attr-defined]
                    if r.status_code != 200 or '"state":"ready"' not in r.text:
                        return False
                return True
            await poll(routable, "the agents' cards ready")
        yield tools


def request(*parts: Part, skill: str = "", immediately: bool = False) -> SendMessageRequest:
    msg = Message(message_id=f"m-{os.urandom(4).hex()}", role=Role.ROLE_USER, parts=list(parts))
    req = SendMessageRequest(message=msg)
    if skill:
        req.metadata.update({"skill": skill})
    if immediately:
        req.configuration.return_immediately = True
    return req


def data_part(value: Any) -> Part:
    v = struct_pb2.Value()
    json_format.ParseDict(value, v)
    return Part(data=v)


async def send(client: Any, req: SendMessageRequest) -> Any:
    events = [e async for e in client.send_message(req)]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


async def test_card_and_messages(web: Stack, agents: Agent) -> None:
    base = f"{web.http}/a2a/a2a.tools"  # type: ignore[attr-defined]
    client = await create_client(base, ClientConfig(streaming=False))
    try:
        card = client._card  # resolved from /a2a/a2a.tools/.well-known/agent-card.json
        assert card.name == "a2a.tools" and card.version == "1.4.0"
        assert [s.id for s in card.skills] == ["a2a.echo", "a2a.refuse", "a2a.slow"]
        assert card.supported_interfaces[0].url == base and card.supported_interfaces[0].protocol_binding == "JSONRPC"
        ext = {e.uri: json_format.MessageToDict(e.params) for e in card.capabilities.extensions}
        assert ext["urn:agentreach:a2a:schemas:v1"]["skills"]["a2a.echo"]["input_schema"] == {"type": "object"}
        assert ext["urn:agentreach:a2a:readiness:v1"]["state"] == "ready"

        # A data part is the payload.
        task = await send(client, request(data_part({"n": 1, "s": "x"}), skill="a2a.echo"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert json_format.MessageToDict(task.artifacts[0].parts[0].data) == {"n": 1, "s": "x"}
        # A text part becomes {"text": …}.
        task = await send(client, request(Part(text="hello"), skill="a2a.echo"))
        assert json_format.MessageToDict(task.artifacts[0].parts[0].data) == {"text": "hello"}
        # A business rejection is a rejected task, with the reason.
        task = await send(client, request(Part(text="x"), skill="a2a.refuse"))
        assert task.status.state == TaskState.TASK_STATE_REJECTED
        assert "not on a Sunday" in task.status.message.parts[0].text
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.id == task.id and got.status.state == TaskState.TASK_STATE_REJECTED
        # A message without a usable part: BAD_REQUEST, the A2A invalid-params error.
        with pytest.raises(InvalidParamsError):
            await send(client, request(Part(url="https://example.com/f"), skill="a2a.echo"))
    finally:
        await client.close()


async def test_streaming_message(web: Stack, agents: Agent) -> None:
    # A type with one skill: the message need not name it.
    client = await create_client(f"{web.http}/a2a/a2a-echo", ClientConfig(streaming=True))  # type: ignore[attr-defined]
    try:
        assert client._card.capabilities.streaming
        events = [e async for e in client.send_message(request(data_part([1, 2, 3])))]
        assert len(events) == 1
        task = events[0].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert json_format.MessageToDict(task.artifacts[0].parts[0].data) == [1, 2, 3]
        # As docs/a2a.md shows it: a text message made by the SDK's helper.
        events = [e async for e in client.send_message(SendMessageRequest(message=new_text_message("hi", role=Role.ROLE_USER)))]
        assert json_format.MessageToDict(events[0].task.artifacts[0].parts[0].data) == {"text": "hi"}
    finally:
        await client.close()


async def test_streamed_result(web: Stack, agents: Agent) -> None:
    # A skill that streams: each chunk an artifact update of the result
    # artifact (the first append false, later ones true), a last update
    # with lastChunk, then the final task with the whole result.
    client = await create_client(f"{web.http}/a2a/a2a-story", ClientConfig(streaming=True))  # type: ignore[attr-defined]
    try:
        events = [e async for e in client.send_message(SendMessageRequest(message=new_text_message("once upon a time", role=Role.ROLE_USER)))]
        assert [e.WhichOneof("payload") for e in events] == ["artifact_update"] * 5 + ["task"], events
        updates = [e.artifact_update for e in events[:5]]
        assert [json_format.MessageToDict(u.artifact.parts[0].data) for u in updates[:4]] == ["once ", "upon ", "a ", "time "]
        assert [u.append for u in updates] == [False, True, True, True, True]
        assert [u.last_chunk for u in updates] == [False, False, False, False, True]
        assert updates[4].artifact.parts[0].text == ""
        task = events[5].task
        assert {u.artifact.artifact_id for u in updates} == {task.artifacts[0].artifact_id}
        assert {(u.task_id, u.context_id) for u in updates} == {(task.id, task.context_id)}
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert json_format.MessageToDict(task.artifacts[0].parts[0].data) == "once upon a time "
    finally:
        await client.close()


async def test_get_and_cancel_task(web: Stack, agents: Agent) -> None:
    client = await create_client(f"{web.http}/a2a/a2a.tools", ClientConfig(streaming=False))  # type: ignore[attr-defined]
    try:
        task = await send(client, request(Part(text="wait"), skill="a2a.slow", immediately=True))
        assert task.status.state == TaskState.TASK_STATE_WORKING
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_WORKING
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
    finally:
        await client.close()


async def test_python_agent_answers_micro(web: Stack, agents: Agent) -> None:
    nc = await nats.connect(web.url)
    try:
        info = json.loads((await nc.request("$SRV.INFO.a2a_tools", b"", timeout=WAIT)).data)
        assert info["id"] == "a2a-tools-1" and info["version"] == "1.4.0"
        assert info["type"] == "io.nats.micro.v1.info_response" and info["description"] == "tools for the A2A tests"
        assert [(e["name"], e["metadata"]["capability"], e["subject"]) for e in info["endpoints"]] == [
            ("a2a_echo", "a2a.echo", "reach.agent.a2a-tools-1"), ("a2a_refuse", "a2a.refuse", "reach.agent.a2a-tools-1"),
            ("a2a_slow", "a2a.slow", "reach.agent.a2a-tools-1")]
        stats = json.loads((await nc.request("$SRV.STATS.a2a_tools.a2a-tools-1", b"", timeout=WAIT)).data)
        by = {e["name"]: e for e in stats["endpoints"]}
        assert by["a2a_refuse"]["num_errors"] == by["a2a_refuse"]["num_requests"]
        ping = json.loads((await nc.request("$SRV.PING.a2a-echo", b"", timeout=WAIT)).data)
        assert ping["name"] == "a2a-echo" and ping["id"] == "a2a-echo-1"
    finally:
        await nc.close()
    cli = os.environ.get("AGENTREACH_NATS_CLI") or str(REPO / "bin" / "nats")
    if Path(cli).exists():  # the stock CLI, when `make` installed it
        # On a thread: the agents answer on this event loop.
        out = await asyncio.to_thread(subprocess.run, [cli, "--server", web.url, "micro", "ls"], capture_output=True,
                                      text=True, timeout=30, env={**os.environ, "HOME": str(web.data)})
        assert out.returncode == 0 and "a2a_tools" in out.stdout and "a2a-echo" in out.stdout, out


async def test_bad_input(web: Stack, agents: Agent) -> None:
    async with httpx.AsyncClient(base_url=web.http) as h:  # type: ignore[attr-defined]
        r = await h.get("/a2a/nobody/.well-known/agent-card.json")
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
        r = await h.post("/a2a/a2a-echo", content=b"{not json", headers={"A2A-Version": "1.0"})
        assert r.json()["error"]["code"] == -32700
        r = await h.post("/a2a/a2a-echo", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
        assert r.json()["error"]["code"] == -32009  # no A2A-Version: 0.3, not served
    with pytest.raises(A2AClientError):
        await create_client(f"{web.http}/a2a/nobody")  # type: ignore[attr-defined]
