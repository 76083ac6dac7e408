"""An MCP server of the official Python SDK (MCPServer, streamable HTTP, its defaults: no event
store, one GET stream per session, 409 to a second), with the tools the interoperability test
calls. Prints one JSON line when it listens: {"event": "listening", "id", "url", "port", "pid"}.

Usage: replica.py --id ID
"""

import argparse
import json
import os
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer


def build(replica: str) -> MCPServer:
    server = MCPServer(f"python-replica-{replica}")

    @server.tool()
    def whoami() -> str:
        """The id of the replica that answers."""
        return replica

    @server.tool()
    async def emit(count: int, ctx: Context) -> str:
        """Sends count logging notifications (data {seq: 1..count, replica}) on the session's GET stream."""
        for seq in range(1, count + 1):
            # Without a related request the notification goes to the session's standalone GET stream.
            await ctx.session.send_log_message(level="info", data={"seq": seq, "replica": replica}, logger="emit")
        return f"emitted {count} on get stream"

    return server


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--id", required=True)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = build(args.id).streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    url = f"http://127.0.0.1:{port}/mcp"

    async def announce() -> None:
        while not server.started:
            await anyio.sleep(0.01)
        print(json.dumps({"event": "listening", "id": args.id, "url": url, "port": port, "pid": os.getpid()}), flush=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
