"""Prometheus metrics, on their own port, in a registry per server (tests run several).

The exporter is served from the server's event loop (``MetricsServer``), not by
prometheus_client's threaded HTTP server, which spent a thread on every connection for as
long as it stayed open: 1,000 idle sockets held 1,000 threads, on a port that compose and
Kubernetes bind on every interface. Here an open connection costs a socket and a small
coroutine; it has ``REQUEST_SECONDS`` to send its request, and at most ``MAX_CONNECTIONS``
are open at once: one beyond that closes the oldest that is still silent, so a scrape always
gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("nmt_requests", "RPCs answered, by method and status code", ["method", "code"],
                                registry=r)
        self.texts = Counter("nmt_texts", "Texts received for translation", ["model"], registry=r)
        self.latency = Histogram("nmt_request_latency_seconds", "RPC latency", ["method"], buckets=LATENCY_BUCKETS,
                                 registry=r)
        self.queue_seconds = Histogram("nmt_queue_seconds", "Time a text waited before joining the batch",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.batch_rows = Histogram("nmt_batch_rows", "Rows (sequences x beams) in each decoder step",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.tokens_generated = Counter("nmt_tokens_generated", "Decoder tokens generated (all beams)", registry=r)
        self.in_flight = Gauge("nmt_in_flight_sequences", "Texts being decoded", ["model"], registry=r)
        self.queued = Gauge("nmt_queued_texts", "Texts waiting to join the batch", ["model"], registry=r)
        self.suspended = Counter("nmt_suspended", "Bulk texts taken out of the batch (their caches kept) to give "
                                 "interactive work the rows of a fast step", ["model"], registry=r)
        self.sentences = Counter("nmt_sentences", "Sentences translated (texts after sentence splitting; sentence "
                                 "cache hits too)", ["model"], registry=r)
        # Outputs that may be cut short: a rate above a few per thousand of nmt_sentences
        # says the output-length limit is too tight for what is sent.
        self.length_limited = Counter("nmt_length_limited", "Sentences whose best hypothesis stopped at the "
                                      "output-length limit", ["model"], registry=r)

        # The sentence cache (server/cache.py): its hit rate is hits / (hits + misses).
        self.cache_hits = Counter("nmt_cache_hits", "Sentences answered without decoding them: from the sentence "
                                  "cache, or decoded once for several", ["model"], registry=r)
        self.cache_misses = Counter("nmt_cache_misses", "Sentences decoded with the sentence cache on (not found "
                                    "in it)", ["model"], registry=r)
        self.cache_shared = Counter("nmt_cache_shared", "Of the hits, sentences answered by another request's "
                                    "decode of the same sentence in flight", ["model"], registry=r)
        self.cache_bytes = Gauge("nmt_cache_bytes", "Bytes held by the sentence cache", registry=r)
        self.cache_entries = Gauge("nmt_cache_entries", "Sentences held by the sentence cache", registry=r)

        # 1 per loaded model, labelled with where it really runs (engine/runtime.py checks the
        # providers the sessions got): a server meant for the GPU that fell back shows cpu here.
        self.model_device = Gauge("nmt_model_device", "Device, graph variant and cache residency of each model",
                                  ["model", "device", "variant", "resident"], registry=r)
        self.exporter: MetricsServer | None = None

    async def serve(self, port: int, host: str) -> int:
        """Start the HTTP exporter on the running event loop; returns the bound port (port 0 picks
        a free one). Raises OSError (errno EADDRINUSE: the port is taken) when it cannot listen."""
        self.exporter = MetricsServer(self.registry)
        return await self.exporter.start(host, port)

    async def close(self) -> None:
        if self.exporter is not None:
            await self.exporter.close()



MAX_CONNECTIONS = 64  # metrics connections open at once; a scraper needs one
REQUEST_SECONDS = 10.0  # from connecting to the end of the request's headers
MAX_REQUEST_BYTES = 8192  # request line and headers


class MetricsServer:
    """``GET /metrics`` (any path but /favicon.ico, as prometheus_client answers) on the running
    event loop, one response per connection (``Connection: close``)."""

    def __init__(self, registry: CollectorRegistry, max_connections: int = MAX_CONNECTIONS,
                 request_seconds: float = REQUEST_SECONDS) -> None:
        self.registry = registry
        self.max_connections = max_connections
        self.request_seconds = request_seconds
        self.server: asyncio.Server | None = None
        self._open: set[asyncio.Task] = set()
        self._silent: dict[asyncio.Task, float] = {}  # connections that have not sent their request yet, oldest first

    async def start(self, host: str, port: int) -> int:
        """Listen; the bound port (0 picks a free one). OSError (EADDRINUSE: taken) when it cannot."""
        self.server = await asyncio.start_server(self._connection, host.strip("[]") or None, port,
                                                 limit=MAX_REQUEST_BYTES, reuse_address=True)
        return self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)

    @property
    def connections(self) -> int:
        return len(self._open)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open.add(task)
        self._silent[task] = time.monotonic()
        if len(self._open) > self.max_connections:
            oldest = next(iter(self._silent))  # this one at the latest: it has sent nothing either
            # Counted out now: connections accepted together all start before the cancelled one ends.
            del self._silent[oldest]
            self._open.discard(oldest)
            oldest.cancel()
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.request_seconds)
            except asyncio.LimitOverrunError:
                await self._respond(writer, 431, b"request headers too large\n")
                return
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            self._silent.pop(task, None)
            await self._answer(head, writer)
        except asyncio.CancelledError:
            pass  # closed: evicted, or the server stops
        finally:
            self._silent.pop(task, None)
            self._open.discard(task)
            writer.close()

    async def _answer(self, head: bytes, writer: asyncio.StreamWriter) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            await self._respond(writer, 400, b"bad request\n")
            return
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            await self._respond(writer, 405, b"only GET and HEAD\n", extra=(("Allow", "GET, HEAD"),))
            return
        if target.split("?", 1)[0] == "/favicon.ico":
            await self._respond(writer, 200, b"")
            return
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        body = encoder(self.registry)
        await self._respond(writer, 200, body, content_type, head_only=method == "HEAD")

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str = "text/plain",
                       extra: tuple[tuple[str, str], ...] = (), head_only: bool = False) -> None:
        reason = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large"}[status]
        fields = [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Connection", "close"),
                  *extra]
        head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields) + "\r\n"
        with contextlib.suppress(ConnectionError, TimeoutError):  # a reader that does not read: dropped
            writer.write(head.encode("latin-1") + (b"" if head_only else body))
            await asyncio.wait_for(writer.drain(), REQUEST_SECONDS)
