"""A third-party MCP server (written with fastmcp, not with Agent-Reach):
the weather tools the connector example joins. Run on stdio by
`agentreach connect mcp --name weather -- python weather.py`."""

from fastmcp import FastMCP

server = FastMCP("weather", version="1.0")

FORECASTS = {"oslo": ("snow", -3), "lisbon": ("sun", 19), "lima": ("fog", 16)}


@server.tool(annotations={"readOnlyHint": True})
def forecast(city: str, days: int = 1) -> dict:
    """The forecast of a city for the next days (1 to 7)."""
    if not 1 <= days <= 7:
        raise ValueError("days must be 1 to 7")
    sky, celsius = FORECASTS.get(city.lower(), ("clouds", 12))
    return {"city": city, "days": [{"day": d + 1, "sky": sky, "celsius": celsius + d} for d in range(days)]}


@server.tool(annotations={"readOnlyHint": True})
def alerts(region: str) -> str:
    """Weather alerts of a region, as text."""
    return f"no alerts for {region}"


if __name__ == "__main__":
    server.run(transport="stdio", show_banner=False)
