"""The gateway's connection limits (gateway/connections.py) on the real gateway, with raw
sockets playing the slow and idle clients. No gRPC server is needed: /healthz answers
without one, and the limits act before any request reaches the application."""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest

from gateway.config import GatewayConfig
from gateway.connections import AcceptErrors
from tests.gateway_harness import GatewayThread
from tests.server_harness import wait_until

NOWHERE = "127.0.0.1:9"  # the gateway never calls the server in these tests


@pytest.fixture
def gw():
    g = GatewayThread(GatewayConfig(grpc_address=NOWHERE, max_connections=3, header_seconds=1.0, body_seconds=1.0))
    yield g
    g.stop()


def connect(g: GatewayThread) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
    return s


def answer(s: socket.socket) -> tuple[int, dict]:
    """Read until the server closes the connection: the status and the JSON body."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def guard(g: GatewayThread):
    return g.server.config.app.state.connections


def healthz(s: socket.socket) -> tuple[int, dict]:
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    return answer(s)


def test_at_the_cap_a_newcomer_takes_the_place_of_the_longest_idle_connection(gw, caplog):
    """A flood of connections that send nothing cannot keep a real client out: each newcomer
    closes the connection that has waited longest without a request, and is served."""
    caplog.set_level(logging.WARNING, logger="nmt.http")
    idle = [connect(gw) for _ in range(3)]
    for i in range(3):  # the cap full of idle connections each time, the oldest first to go
        wait_until(lambda: guard(gw).open == 3)
        with connect(gw) as real:
            assert healthz(real) == (200, {"status": "ok"})
        idle[i].settimeout(10)
        assert idle[i].recv(100) == b""  # closed without an answer
        idle[i].close()
        idle.append(connect(gw))  # the flood fills the place again
    lines = [r.getMessage() for r in caplog.records if "turned away" in r.getMessage()]
    assert lines == ["connections turned away since the last such line: 1 closed for newcomers (3 open, the "
                     "limit is 3)"]
    assert (guard(gw).evicted, guard(gw).refused) == (3, 0)
    for s in idle[3:]:
        s.close()
    wait_until(lambda: guard(gw).open == 0)


def test_at_the_cap_with_every_connection_busy_a_newcomer_is_503_at_once(gw, caplog):
    caplog.set_level(logging.WARNING, logger="nmt.http")
    busy = [connect(gw) for _ in range(3)]
    for s in busy:  # each has its headers in and is sending a body: a request in hand
        s.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{")
    wait_until(lambda: guard(gw).open == 3 and not guard(gw).waiting)
    started = time.monotonic()
    for _ in range(20):  # each refused at once, one log line for all
        with connect(gw) as extra:
            assert answer(extra) == (503, {"error": "this gateway has 3 connections open, its limit "
                                                    "(--max-connections); try again later"})
    assert time.monotonic() - started < 5
    lines = [r.getMessage() for r in caplog.records if "turned away" in r.getMessage()]
    assert lines == ["connections turned away since the last such line: 1 refused (3 open, the limit is 3)"]
    for s in busy:  # their bodies never came within --body-seconds
        assert answer(s)[0] == 408
        s.close()
    wait_until(lambda: guard(gw).open == 0)
    assert (guard(gw).refused, guard(gw).timed_out) == (20, 3)
    with connect(gw) as s:  # a real request is served again
        assert healthz(s) == (200, {"status": "ok"})


def test_connections_that_send_nothing_are_closed_after_the_header_time(gw):
    idle = [connect(gw) for _ in range(2)]
    started = time.monotonic()
    for s in idle:
        s.settimeout(10)
        assert s.recv(100) == b""
        s.close()
    assert 0.9 < time.monotonic() - started < 5  # --header-seconds 1 from the connection's opening
    wait_until(lambda: guard(gw).open == 0)
    assert guard(gw).timed_out == 2


def test_slow_headers_and_slow_bodies_are_408(gw):
    with connect(gw) as s:
        s.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
        assert answer(s) == (408, {"error": "the request's headers did not arrive within 1 s (--header-seconds)"})
    with connect(gw) as s:
        s.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"q\": ")
        assert answer(s) == (408, {"error": "the request's body did not arrive within 1 s of its headers "
                                            "(--body-seconds)"})
    # A slowloris on a kept-alive connection: one request answered, then the next one trickles.
    with connect(gw) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        for _ in range(4):
            time.sleep(0.4)
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        assert answer(s)[0] == 408
    wait_until(lambda: guard(gw).open == 0)


def test_a_request_with_both_content_length_and_transfer_encoding_is_400_and_closed(gw):
    """RFC 9112, 6.1: such a request's length is ambiguous (the way requests are smuggled past
    a proxy that reads it the other way); it was answered and its connection kept, so the
    GET pipelined after it was answered too. Now: 400, Connection: close, nothing more read."""
    for body in (b"0\r\n\r\n", b"{}"):
        with connect(gw) as s:
            s.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s"
                      b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % (len(body), body))
            data = b""
            while chunk := s.recv(65536):  # until the gateway closes the connection
                data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request"
        assert b"\r\nConnection: close" in head
        assert json.loads(rest) == {"error": "Invalid request: it has both Content-Length and Transfer-Encoding, "
                                             "which make the length of its body ambiguous (RFC 9112, 6.1); send one "
                                             "of them"}
        assert data.count(b"HTTP/1.1 ") == 1  # the pipelined GET was not answered
    with connect(gw) as s:  # either header alone is served as before
        s.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
        assert answer(s) == (400, {"error": "Invalid request: missing q parameter"})
    wait_until(lambda: guard(gw).open == 0)


def test_accept_failures_are_one_line_without_the_traceback():
    f = AcceptErrors()
    records = []
    for _ in range(1000):
        r = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "socket.accept() out of system resource\n"
                              "socket: %s", ("<socket>",), None)
        r.exc_info = (OSError, OSError(24, "Too many open files"), None)
        if f.filter(r):
            records.append(r)
    [line] = records
    assert (line.getMessage(), line.exc_info) == (
        "socket.accept() failed: out of file descriptors (0 more such failures not logged); lower "
        "--max-connections or raise the process's file limit", None)
    other = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "Task exception was never retrieved", (), None)
    assert f.filter(other)
