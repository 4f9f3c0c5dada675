"""A small MCP server written with fastmcp (a third-party SDK), served on
stdio, that the MCP connector's tests join. Its tools cover the result
shapes: structured output, JSON text, plain text, an error, a read-only
annotation, and a tool list that changes (unlock)."""

import sys

import mcp.types as mt
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError

server = FastMCP("fastmcp-test", version="1.0")


@server.tool
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool(annotations={"readOnlyHint": True})
def getWeather(city: str) -> dict:  # noqa: N802 - a camelCase tool name on purpose
    """Reports the weather of a city."""
    return {"city": city, "sky": "clear", "celsius": 21}


@server.tool(output_schema=None)
def greet(name: str) -> str:
    """Returns a greeting as plain text."""
    return f"hello, {name}"


@server.tool
def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ToolError(reason)


def secret() -> str:
    """Appears once unlock has been called."""
    return "42"


@server.tool
async def unlock(ctx: Context) -> str:
    """Adds the tool secret and tells the client its tool list changed."""
    server.add_tool(secret)
    await ctx.send_notification(mt.ToolListChangedNotification())
    return "unlocked"


if __name__ == "__main__":
    print("fastmcp server on stdio", file=sys.stderr)
    server.run(transport="stdio", show_banner=False)
