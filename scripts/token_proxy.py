"""A loopback reverse proxy that adds ``Authorization: Bearer <token>`` to every request.

The MCP conformance suite cannot send a token; this lets it test a server that requires one
without switching auth off. Headers (Host and Origin included) and bodies pass through
unchanged, and responses stream, so SSE works.

    python scripts/token_proxy.py --upstream http://127.0.0.1:8080 --port 0 --token-file F
prints ``proxy listening on http://127.0.0.1:PORT`` once it is ready.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
from pathlib import Path
from typing import Any

import httpx
import uvicorn

HOP_BY_HOP = {
    b"authorization",
    b"connection",
    b"content-length",
    b"keep-alive",
    b"transfer-encoding",
    b"accept-encoding",
}


def build(upstream: str, token: str) -> Any:
    client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None), follow_redirects=False)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        # a field value excludes its optional whitespace (RFC 9110 §5.5); h11 refuses to send it
        headers = [
            (k, v.strip(b" \t")) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP
        ]
        headers.append((b"authorization", f"Bearer {token}".encode()))
        url = upstream + scope["raw_path"].decode()
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode()
        request = client.build_request(scope["method"], url, headers=headers, content=body)
        response = await client.send(request, stream=True)

        async def pump() -> None:
            out = [
                (k.encode(), v.encode())
                for k, v in response.headers.multi_items()
                if k.lower().encode() not in HOP_BY_HOP
            ]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": out}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        pumping = asyncio.create_task(pump())
        watching = asyncio.create_task(watch())
        try:
            await asyncio.wait({pumping, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pumping, watching):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
            await response.aclose()

    return app


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-file", type=Path, required=True)
    args = parser.parse_args()
    token = args.token_file.read_text().strip()
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        build(args.upstream.rstrip("/"), token), lifespan="off", access_log=False, log_config=None
    )
    server = uvicorn.Server(config)
    print(f"proxy listening on http://127.0.0.1:{port}", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
