"""Our server as a benchmark target: ``nmt-serve`` in a subprocess on a free 127.0.0.1 port,
and closed-loop gRPC clients that keep it busy.

Used by ``bench/server_throughput.py`` and ``bench/nmt_bench.py``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from cli import free_port
from engine.defaults import LENGTH_PENALTY
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[1]



def process_rss_mib(pid: int, field: str = "VmHWM") -> float:
    """A process's peak (VmHWM) or current (VmRSS) resident set size, from /proc (0 if unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class ServerProcess:
    """``with ServerProcess(package, threads=1) as srv:`` -> a SERVING server on ``srv.port``."""

    def __init__(self, package: str | Path, threads: int, max_batch_rows: int = 64, device: str = "cpu",
                 extra: Sequence[str] = (), start_timeout: float = 120.0, log: Path | None = None) -> None:
        self.port = free_port()
        self.args = [sys.executable, "-m", "server.main", "--model", str(package), "--host", "127.0.0.1",
                     "--port", str(self.port), "--metrics-port", "-1", "--device", device, "--threads", str(threads),
                     "--max-batch-rows", str(max_batch_rows), "--log-level", "WARNING", *extra]
        self.start_timeout = start_timeout
        self.log = log  # the server's stderr goes here (default: this process's)
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> ServerProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        stderr = self.log.open("ab") if self.log else None
        self.proc = subprocess.Popen(self.args, env=env, cwd=ROOT, stderr=stderr)
        if stderr:
            stderr.close()  # the child holds its own copy
        try:
            self._wait_serving()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_serving(self) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + self.start_timeout
        with grpc.insecure_channel(self.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"nmt-serve exited with code {self.proc.returncode} before serving")
                try:
                    if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                        return
                except grpc.RpcError:
                    time.sleep(0.1)
        raise TimeoutError(f"nmt-serve did not report SERVING within {self.start_timeout:.0f}s")

    def __exit__(self, *exc: object) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen | None, grace: float = 30.0) -> None:
    """SIGTERM (the servers drain), then SIGKILL after ``grace`` seconds."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Request:
    texts: list[str]
    source_lang: str
    target_lang: str


@dataclass(frozen=True)
class LoadResult:
    seconds: float  # wall time of the whole load, first request sent to last answer
    latencies: list[float]  # per request, in the order of ``requests``
    responses: list[pb.TranslateResponse]


async def _load(address: str, requests: Sequence[Request], concurrency: int, beam_size: int,
                alpha: float) -> LoadResult:
    # Each text as one sentence: the offline engines this is compared with do not split.
    options = pb.DecodingOptions(beam_size=beam_size, length_penalty=alpha if beam_size > 1 else 0.0,
                                 no_sentence_split=True)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        first = requests[0]
        await stub.Translate(pb.TranslateRequest(texts=first.texts[:1], source_lang=first.source_lang,
                                                 target_lang=first.target_lang, options=options))  # warm-up
        todo = list(range(len(requests)))[::-1]
        latencies = [0.0] * len(requests)
        responses: list[pb.TranslateResponse | None] = [None] * len(requests)

        async def client() -> None:
            while todo:
                i = todo.pop()
                r = requests[i]
                t0 = time.perf_counter()
                responses[i] = await stub.Translate(pb.TranslateRequest(
                    texts=r.texts, source_lang=r.source_lang, target_lang=r.target_lang, options=options), timeout=3600)
                latencies[i] = time.perf_counter() - t0

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        seconds = time.perf_counter() - start
    return LoadResult(seconds, latencies, [r for r in responses if r is not None])


def run_load(address: str, requests: Sequence[Request], concurrency: int, beam_size: int = 1,
             alpha: float = LENGTH_PENALTY) -> LoadResult:
    """``concurrency`` closed-loop clients send ``requests`` (each waits for its answer before
    taking the next one); one untimed warm-up request first."""
    return asyncio.run(_load(address, requests, concurrency, beam_size, alpha))
