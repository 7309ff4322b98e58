"""Slow and idle clients for the soak (bench/load/soak.py --hostile): what takes a server down
without sending any work, run beside the normal load.

- ``idle_streams``: TranslateStream calls that send nothing, reopened when the server ends them
  (RESOURCE_EXHAUSTED beyond --max-streams, DEADLINE_EXCEEDED after --stream-idle-seconds);
- ``idle_tcp``: TCP connections to a port that send nothing, reopened when closed;
- ``slow_headers`` (slowloris): HTTP requests whose headers trickle in a line at a time;
- ``slow_bodies``: HTTP requests announcing a 1 MB body and sending a kilobyte now and then;
- ``http_bombs``: format=html requests with thousands of unclosed or nested tags, one with
  more tags than the gateway's limit (400), and requests with both Content-Length and
  Transfer-Encoding (400, connection closed);
- ``watch_health``: gRPC Health and the gateway's /readyz once a second: each must answer.

Each actor counts how its connections or calls ended (``Outcomes``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nmt.v1 import translator_pb2_grpc as pb_grpc

RECONNECT_SECONDS = 0.5  # an actor's pause before it replaces what the server closed


class Outcomes(collections.Counter):
    """How each kind of hostile call or connection ended, e.g. ("idle-stream", "DEADLINE_EXCEEDED")."""


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


async def idle_streams(address: str, n: int, until: float, out: Outcomes) -> None:
    hold = asyncio.Event()

    async def nothing():
        await hold.wait()
        return
        yield  # pragma: no cover  (an async generator that never yields)

    async def one(stub: pb_grpc.TranslatorStub) -> None:
        while time.monotonic() < until:
            call = stub.TranslateStream(nothing(), timeout=max(until - time.monotonic(), 0.1))
            try:
                async for _ in call:
                    pass
                code = "OK"
            except grpc.aio.AioRpcError as e:
                code = e.code().name
            out["idle-stream", code] += 1
            await asyncio.sleep(RECONNECT_SECONDS)

    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        try:
            await asyncio.gather(*(one(stub) for _ in range(n)))
        finally:
            hold.set()


async def _connect(host: str, port: int, out: Outcomes, kind: str):
    """A connection, or None (counted as refused, after a pause) when it cannot be made."""
    try:
        return await asyncio.open_connection(host, port)
    except OSError:
        out[kind, "refused"] += 1
        await asyncio.sleep(RECONNECT_SECONDS)
        return None


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def idle_tcp(host: str, port: int, n: int, until: float, out: Outcomes, kind: str = "idle-tcp") -> None:
    async def one() -> None:
        while time.monotonic() < until:
            if (connection := await _connect(host, port, out, kind)) is None:
                continue
            reader, writer = connection
            closed = False
            with contextlib.suppress(TimeoutError, ConnectionError):
                while await asyncio.wait_for(reader.read(4096), max(until - time.monotonic(), 0.1)):
                    pass  # the server's greeting (HTTP/2 settings): read on until it closes
                closed = True
            await _close(writer)
            out[kind, "closed by the server" if closed else "open at the end"] += 1
            await asyncio.sleep(RECONNECT_SECONDS)

    await asyncio.gather(*(one() for _ in range(n)))


async def _slow_http(host: str, port: int, until: float, out: Outcomes, kind: str, head: bytes, drip: bytes,
                     every: float) -> None:
    while time.monotonic() < until:
        if (connection := await _connect(host, port, out, kind)) is None:
            continue
        reader, writer = connection
        status = "open at the end"
        try:
            writer.write(head)
            while time.monotonic() < until:
                try:
                    answer = await asyncio.wait_for(reader.read(4096), every)
                except TimeoutError:
                    writer.write(drip)  # one more line of headers, or a kilobyte of body
                    continue
                status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "closed"
                break
        except ConnectionError:
            status = "reset"
        await _close(writer)
        out[kind, status] += 1
        await asyncio.sleep(RECONNECT_SECONDS)


async def slow_headers(host: str, port: int, n: int, until: float, out: Outcomes) -> None:
    head = b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    await asyncio.gather(*(_slow_http(host, port, until, out, "slow-headers", head, b"X-Slow: 1\r\n", 2.0)
                           for _ in range(n)))


async def slow_bodies(host: str, port: int, n: int, until: float, out: Outcomes) -> None:
    head = (b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n{\"q\": \"")
    await asyncio.gather(*(_slow_http(host, port, until, out, "slow-body", head, b"a" * 1024, 2.0)
                           for _ in range(n)))


async def http_translate(host: str, port: int, until: float, out: Outcomes, text: str) -> None:
    """A well-behaved HTTP client: one LibreTranslate request after another, each on its own connection."""
    body = json.dumps({"q": text, "source": "en", "target": "de"}).encode()
    request = (b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            answer = await asyncio.wait_for(reader.read(), 60)
            writer.close()
            status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "no answer"
        except (OSError, TimeoutError) as e:
            status = type(e).__name__
        out["http-translate", status] += 1


def _post(body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\n" + extra + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _html(q: str) -> bytes:
    return _post(json.dumps({"q": q, "source": "en", "target": "de", "format": "html"}).encode())


BOMBS = {  # name -> the raw request; each must be answered 200 or 400, never hang or take health down
    "unclosed-tags": _html("<p>" + "<b>" * 6000 + "Click OK."),
    "nested-tags": _html("<b>" * 1200 + "Click OK." + "</b>" * 1200),
    "over-tag-limit": _html("<i>x</i>" * 12000),
    "cl-and-te": _post(b'{"q": "Hello", "source": "en", "target": "de"}', b"Transfer-Encoding: chunked\r\n")
                 + b"GET /languages HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
}


async def http_bombs(host: str, port: int, until: float, out: Outcomes) -> None:
    """One bomb after another, each on its own connection; counted as ("http-bomb NAME", status)."""
    names = list(BOMBS)
    i = 0
    while time.monotonic() < until:
        name = names[i % len(names)]
        i += 1
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(BOMBS[name])
            answer = await asyncio.wait_for(reader.read(), 60)
            writer.close()
            status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "no answer"
            if name == "cl-and-te" and answer.count(b"HTTP/1.1 ") > 1:
                status += " and a pipelined answer"
        except (OSError, TimeoutError) as e:
            status = type(e).__name__
        out[f"http-bomb {name}", status] += 1


async def watch_health(address: str, http_host: str, http_port: int, until: float, failures: list[str]) -> int:
    """Ask both health endpoints once a second until ``until``; each miss is noted with its time."""
    checks = 0
    start = time.monotonic()
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < until:
            checks += 1
            at = f"{time.monotonic() - start:.0f}s"
            try:
                r = await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if r.status != health_pb2.HealthCheckResponse.SERVING:
                    failures.append(f"{at} gRPC health {r.status}")
            except grpc.aio.AioRpcError as e:
                failures.append(f"{at} gRPC health {e.code().name}")
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(http_host, http_port), 2)
                writer.write(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                answer = await asyncio.wait_for(reader.read(), 2)
                writer.close()
                if not answer.startswith(b"HTTP/1.1 200 "):
                    failures.append(f"{at} /readyz {answer[:40]!r}")
            except (OSError, TimeoutError) as e:
                failures.append(f"{at} /readyz {type(e).__name__}")
            await asyncio.sleep(1.0)
    return checks
