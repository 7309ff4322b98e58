"""The gateway's connection-level limits, which uvicorn lacks: a cap on open connections,
a time limit for a request's headers and one for its body, and one rate-limited log line
for a flood instead of a line (or a traceback) per connection.

uvicorn's h11 protocol reads requests; ``protocol_class`` gives it a subclass that a
``ConnectionGuard`` watches. Without these, connections that send half a request stay open
for ever: 20,000 of them exhausted the file descriptors, real requests timed out, and the
accept loop's tracebacks grew the log by 150 MB in 40 s.

- At ``max_connections`` open, a new connection takes the place of the one that has waited
  longest without a complete request (idle, or still sending its headers), which is closed:
  a flood of idle connections cannot keep real clients out, since a real client sends its
  request at once. Only when every open connection has a request in hand is the newcomer
  answered 503 (Retry-After) and closed, before anything is read from it.
- A request's headers must be in within ``header_seconds`` of the connection's opening (or of
  the previous response, on a kept-alive connection): a client that sent part of them gets
  408, one that sent nothing is closed.
- Its body must be in within ``body_seconds`` of its headers: 408, closed.
- A request with both Content-Length and Transfer-Encoding is answered 400 and its connection
  closed, before the application sees it (RFC 9112, 6.1: such a request is how requests are
  smuggled past a proxy that reads its length the other way; h11 would go by
  Transfer-Encoding and keep the connection open).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field

import h11
from uvicorn.protocols.http.h11_impl import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE, H11Protocol

log = logging.getLogger("nmt.http")
FLOOD_LOG_EVERY = 10.0  # seconds between two log lines about refused or timed-out connections


def raw_response(status: int, reason: str, message: str, retry_after: bool = False) -> bytes:
    """A complete HTTP/1.1 answer that closes the connection, written straight to the socket
    (the request was never parsed, or never finished)."""
    body = json.dumps({"error": message}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n{'Retry-After: 1' + chr(13) + chr(10) if retry_after else ''}\r\n")
    return head.encode() + body


@dataclass
class ConnectionGuard:
    """Limits shared by every connection of one gateway, and what they have turned away."""

    max_connections: int
    header_seconds: float
    body_seconds: float
    open: int = 0
    refused: int = 0  # since the process started
    timed_out: int = 0
    evicted: int = 0
    # Open connections without a complete request, oldest first (a dict keeps insertion order).
    waiting: dict[GuardedH11Protocol, None] = field(default_factory=dict)
    _unlogged: dict[str, int] = field(default_factory=dict)
    _logged_at: float = -FLOOD_LOG_EVERY

    def __post_init__(self) -> None:
        self.full = raw_response(503, "Service Unavailable", f"this gateway has {self.max_connections} connections "
                                 f"open, its limit (--max-connections); try again later", retry_after=True)
        self.slow_headers = raw_response(408, "Request Timeout", f"the request's headers did not arrive within "
                                         f"{self.header_seconds:g} s (--header-seconds)")
        self.slow_body = raw_response(408, "Request Timeout", f"the request's body did not arrive within "
                                      f"{self.body_seconds:g} s of its headers (--body-seconds)")
        self.ambiguous_length = raw_response(400, "Bad Request", AMBIGUOUS_LENGTH)

    def note(self, what: str) -> None:
        """Count a refused or timed-out connection; log the counts at most every FLOOD_LOG_EVERY s."""
        if what == "refused":
            self.refused += 1
        elif what == "closed for newcomers":
            self.evicted += 1
        else:
            self.timed_out += 1
        self._unlogged[what] = self._unlogged.get(what, 0) + 1
        now = time.monotonic()
        if now - self._logged_at >= FLOOD_LOG_EVERY:
            counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self._unlogged.items()))
            log.warning("connections turned away since the last such line: %s (%d open, the limit is %d)", counts,
                        self.open, self.max_connections)
            self._unlogged.clear()
            self._logged_at = now


AMBIGUOUS_LENGTH = ("Invalid request: it has both Content-Length and Transfer-Encoding, which make the length of "
                    "its body ambiguous (RFC 9112, 6.1); send one of them")


class FramingChecked(h11.Connection):
    """h11's connection, refusing a request that carries both Content-Length and
    Transfer-Encoding: a RemoteProtocolError, for which uvicorn closes the connection."""

    refused = False  # whether it refused a request for that

    def next_event(self):  # type: ignore[no-untyped-def]
        event = super().next_event()
        if isinstance(event, h11.Request):
            names = {name for name, _ in event.headers}  # h11 gives them in lower case
            if b"content-length" in names and b"transfer-encoding" in names:
                self.refused = True
                raise h11.RemoteProtocolError(AMBIGUOUS_LENGTH, error_status_hint=400)
        return event


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol under a ConnectionGuard (``guard`` is set by protocol_class)."""

    guard: ConnectionGuard

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        size = self.config.h11_max_incomplete_event_size
        self.conn = FramingChecked(h11.SERVER, DEFAULT_MAX_INCOMPLETE_EVENT_SIZE if size is None else size)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot read; our JSON one to a request refused for
        its ambiguous length. Either closes the connection: nothing after it is read."""
        if not isinstance(self.conn, FramingChecked) or not self.conn.refused:
            super().send_400_response(msg)
            return
        self.transport.write(self.guard.ambiguous_length)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        guard = self.guard
        self._refused = False
        if guard.open >= guard.max_connections:
            if guard.waiting:  # the longest-waiting connection without a request makes room
                oldest = next(iter(guard.waiting))
                del guard.waiting[oldest]
                oldest.transport.close()
                guard.note("closed for newcomers")
            else:  # every connection has a request in hand
                self._refused = True
                guard.note("refused")
                transport.write(guard.full)
                transport.close()
                return
        guard.open += 1
        self._state: object = h11.IDLE  # the client's h11 state (IDLE, SEND_BODY, DONE...)
        self._since = self.loop.time()
        guard.waiting[self] = None
        super().connection_made(transport)
        self._timer: asyncio.TimerHandle | None = self.loop.call_later(guard.header_seconds, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self.guard.open -= 1
        self.guard.waiting.pop(self, None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._note_state()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._note_state()

    def _note_state(self) -> None:
        """Start the clock of the phase the client is in when it changes (headers, body, done)."""
        state = self.conn.their_state
        if state is not self._state:
            self._state, self._since = state, self.loop.time()
            if state is h11.IDLE:  # a kept-alive connection waits for its next request
                self.guard.waiting[self] = None
            else:
                self.guard.waiting.pop(self, None)

    def _check(self) -> None:
        """Close a connection whose client has been in one phase too long; else look again
        when its time would be up."""
        self._timer = None
        if self.transport.is_closing():
            return
        self._note_state()
        limit = {h11.IDLE: self.guard.header_seconds, h11.SEND_BODY: self.guard.body_seconds}.get(self._state)
        now = self.loop.time()
        if limit is not None and now - self._since >= limit:
            if self._state is h11.SEND_BODY:
                self.transport.write(self.guard.slow_body)
            elif self.conn.trailing_data[0]:  # part of the headers came: say why it is closed
                self.transport.write(self.guard.slow_headers)
            self.guard.note("timed out")
            self.transport.close()
            return
        wait = self._since + limit - now if limit is not None else self.guard.header_seconds
        self._timer = self.loop.call_later(max(wait, 0.05), self._check)


def protocol_class(guard: ConnectionGuard) -> type[H11Protocol]:
    """The protocol class to give uvicorn.Config(http=...), its connections under ``guard``."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": guard})


class AcceptErrors(logging.Filter):
    """asyncio logs every failed accept() (out of file descriptors) with a traceback, thousands a
    second under a flood: let one line through per FLOOD_LOG_EVERY seconds, with the count and
    without the traceback."""

    def __init__(self) -> None:
        super().__init__()
        self._logged_at, self._unlogged = -FLOOD_LOG_EVERY, 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("socket.accept() out of system resource"):
            return True
        now = time.monotonic()
        if now - self._logged_at < FLOOD_LOG_EVERY:
            self._unlogged += 1
            return False
        record.msg, record.args = ("socket.accept() failed: out of file descriptors (%d more such failures not "
                                   "logged); lower --max-connections or raise the process's file limit"), (
                                       self._unlogged,)
        record.exc_info = record.exc_text = None
        self._logged_at, self._unlogged = now, 0
        return True
