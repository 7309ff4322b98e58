"""Run a real server in-process (its own event loop in a thread) on a free localhost port."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc
from server.config import ServerConfig
from server.main import RunningServer, build_server


def session_entry(session, key: str) -> str | None:
    """A session's config entry (spinning, ...), or None where it is not set (onnxruntime raises)."""
    try:
        return session.get_session_options().get_session_config_entry(key)
    except Exception:  # not set: onnxruntime's default
        return None


# Sentences of different lengths; the last one has characters the tiny vocabulary lacks.
TEXTS = [
    "Jesus wept.",
    "In the beginning was the Word, and the Word was with God, and the Word was God.",
    "He said,",
    "The same was in the beginning with God.",
    "All things were made through him. Without him was not anything made that has been made.",
    "Peace be with you.",
    "Ünïcödé — “quotes” and 数字 123",
]


class ServerThread:
    def __init__(self, package: Path, start_timeout: float = 120, **overrides) -> None:
        # fp32 graphs (not the served default, int8): tests compare answers with fp32 engine decodes.
        # No sentence cache (on by default): tests make load with the same texts, watch what the
        # scheduler is given and count what is decoded; tests/test_cache.py turns it on.
        self.cfg = dataclasses.replace(ServerConfig(model=(f"tiny={package}",), host="127.0.0.1", port=0,
                                                    device="cpu", threads=1, int8=False, metrics_port=0,
                                                    metrics_host="127.0.0.1", cache="off"), **overrides)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.running: RunningServer = self.call(build_server(self.cfg), timeout=start_timeout)
        self.port = self.running.port
        self.address = f"127.0.0.1:{self.port}"
        self.channel = grpc.insecure_channel(self.address)

    def call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stub(self, channel: grpc.Channel | None = None) -> pb_grpc.TranslatorStub:
        return pb_grpc.TranslatorStub(channel or grpc.insecure_channel(self.address))

    @property
    def scheduler(self):
        return self.running.models["tiny"].scheduler

    def stop(self) -> None:
        self.call(self.running.drain(1.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def request(*texts: str, src: str = "en", tgt: str = "de", **options) -> pb.TranslateRequest:
    return pb.TranslateRequest(texts=list(texts), source_lang=src, target_lang=tgt,
                               options=pb.DecodingOptions(**options))


def code_and_details(fn) -> tuple[grpc.StatusCode, str]:
    """The status code and details of the RpcError that ``fn()`` raises."""
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code(), err.value.details()


def wait_until(cond, timeout: float = 30.0) -> None:
    """Poll ``cond`` until it holds (30 s: CI machines run other suites beside this one)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


@contextlib.contextmanager
def submitted(scheduler, what: Callable[[list, dict], object]) -> Iterator[list]:
    """``what(jobs, options)`` of each request ``scheduler`` is given while the block runs, in order."""
    seen: list = []
    real = scheduler.submit_all

    def record(jobs, deadline=None, **kwargs):
        seen.append(what(jobs, kwargs))
        return real(jobs, deadline, **kwargs)

    scheduler.submit_all = record
    try:
        yield seen
    finally:
        scheduler.submit_all = real


def priorities_submitted(scheduler) -> contextlib.AbstractContextManager[list]:
    """The priority of each request ``scheduler`` is given while the block runs, in order."""
    return submitted(scheduler, lambda jobs, options: options.get("priority"))
