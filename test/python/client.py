"""A client of the official MCP Python SDK (`mcp.client.streamable_http`, ClientSession), driven by
the interoperability test: it initializes, lets the transport open the session's GET stream itself,
and then calls the tools it is told to on stdin, one JSON object a line:
  {"id": 1, "call": "emit", "arguments": {"count": 1}}   a tools/call
  {"quit": true}                                         closes the session (DELETE) and exits
It tells what it sees on stdout, one JSON object a line, with an "event" of:
  initialized   {"protocolVersion"}
  http          each response of the transport: {"method", "status", "lastEventId"} (a GET's header)
  sse_id        each event id a GET stream's body carries, as it reaches the transport: {"id"}
  log           each record of the SDK's loggers: {"logger", "level", "message"}
  notification  each server notification the session surfaces: {"method", "params"}
  stream_reset  notifications/gateway/stream_reset, only with --bind-reset: {"params"}
  token         each cursor the transport keeps as a call's resumption token: {"id", "token"}
  result        {"id", "text", "isError"}; error {"id", "message"}

Usage: client.py URL [--bind-reset]
"""

import argparse
import json
import logging
import sys
from typing import Any

import anyio
import httpx2
from mcp import types
from mcp.client.extension import NotificationBinding
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from httpx2._types import AsyncByteStream
from mcp.shared.message import ClientMessageMetadata
from pydantic import BaseModel, ConfigDict


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


class Lines(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        say("log", logger=record.name, level=record.levelname, message=record.getMessage())


class StreamReset(BaseModel):
    """The gateway's signal: a stream was not resumed (docs/resumption.md)."""

    model_config = ConfigDict(extra="allow")
    resumed: bool
    reason: str
    lastEventId: str | None = None


class EventIds(AsyncByteStream):
    """A GET response's body, passed on unchanged, with each event id it carries reported (sse_id):
    what the transport has been given to keep as the stream's Last-Event-ID."""

    def __init__(self, inner: AsyncByteStream) -> None:
        self.inner = inner
        self.partial = b""

    async def __aiter__(self):  # type: ignore[override]
        async for chunk in self.inner:
            lines = (self.partial + chunk).split(b"\n")
            self.partial = lines.pop()
            for line in lines:
                if line.startswith(b"id:"):
                    say("sse_id", id=line[3:].strip(b" \r").decode())
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


async def on_response(response: httpx2.Response) -> None:
    request = response.request
    say("http", method=request.method, status=response.status_code, lastEventId=request.headers.get("last-event-id"))
    if request.method == "GET" and isinstance(response.stream, AsyncByteStream):
        response.stream = EventIds(response.stream)


async def on_message(message: Any) -> None:
    if isinstance(message, Exception):
        say("log", logger="message_handler", level="ERROR", message=repr(message))
        return
    say("notification", method=message.method, params=message.params.model_dump(mode="json", by_alias=True) if message.params else None)


async def on_reset(params: StreamReset) -> None:
    say("stream_reset", params=params.model_dump(mode="json"))


async def call_tool(session: ClientSession, command: dict[str, Any]) -> types.CallToolResult:
    """session.call_tool, with each resumption token the transport keeps for the call reported."""

    async def on_token(token: str) -> None:
        say("token", id=command["id"], token=token)

    request = types.CallToolRequest(params=types.CallToolRequestParams(name=command["call"], arguments=command.get("arguments") or {}))
    return await session.send_request(request, types.CallToolResult, metadata=ClientMessageMetadata(on_resumption_token_update=on_token))


async def commands(session: ClientSession) -> None:
    while line := await anyio.to_thread.run_sync(sys.stdin.readline):
        command = json.loads(line)
        if command.get("quit"):
            return
        try:
            result = await call_tool(session, command)
            text = "".join(getattr(block, "text", "") for block in result.content)
            say("result", id=command["id"], text=text, isError=bool(result.is_error))
        except Exception as err:  # the test reads it as a failed call
            say("error", id=command["id"], message=repr(err))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--bind-reset", action="store_true")
    args = parser.parse_args()
    handler = Lines()
    # ClientSession logs as "client", the transports under "mcp".
    for name in ("mcp", "client"):
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).setLevel(logging.DEBUG)
    bindings = [NotificationBinding(method="notifications/gateway/stream_reset", params_type=StreamReset, handler=on_reset)]
    http = create_mcp_http_client()
    http.event_hooks["response"].append(on_response)
    async with http, streamable_http_client(args.url, http_client=http) as (read, write):
        async with ClientSession(
            read, write, message_handler=on_message, notification_bindings=bindings if args.bind_reset else None
        ) as session:
            result = await session.initialize()
            say("initialized", protocolVersion=result.protocol_version)
            await commands(session)
    say("closed")


if __name__ == "__main__":
    anyio.run(main)
