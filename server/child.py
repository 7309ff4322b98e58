"""``nmt-serve`` as a child process: on a free 127.0.0.1 port, ready when its health check
says SERVING (``wait_serving``, also what scripts/wait_serving.py runs), stopped with
SIGTERM (it drains) and SIGKILL after a grace.

    with ServerProcess("packages/default", threads=1) as server:
        ...  # server.address, server.pid

The one way tests, benchmarks and tools start a real server process of their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from cli import free_port

ROOT = Path(__file__).resolve().parents[1]  # the project: the child imports the same modules


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
                     "--max-batch-rows", str(max_batch_rows), "--log-level", "WARNING",
                     # The sentence cache off: benchmarks and load tools send the same sentences
                     # again and measure decoding, not answers from memory; ``extra`` may turn it on.
                     "--cache", "off", *extra]
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
            wait_serving(self.address, self.start_timeout, lambda: self.proc.poll())
        except NotServing as e:
            self.__exit__()
            if self.log:
                raise NotServing(f"{e}; its log ends: {self._log_tail()}") from e
            raise
        except BaseException:
            self.__exit__()
            raise
        return self

    def _log_tail(self, lines: int = 4) -> str:  # only with a log
        """The end of the server's log, one line: why it would not serve, where the log itself
        does not travel (a GPU host gives back only results)."""
        said = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-lines:] \
            if self.log.exists() else []
        return " | ".join(said) or "(empty)"

    def __exit__(self, *exc: object) -> None:
        stop_process(self.proc)


class NotServing(RuntimeError):
    """The server did not say SERVING: its process exited first, or the time ran out."""


def wait_serving(address: str, timeout: float, exited: Callable[[], int | None] | None = None) -> None:
    """Return once the health check of the server at ``address`` says SERVING. ``exited``
    (``Popen.poll``, or ``exit_status(pid)``) tells whether the server's process has ended:
    waiting stops at once when it has. Raises NotServing."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            code = exited() if exited else None
            if code is not None:
                raise NotServing(f"nmt-serve exited with code {code} before serving")
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise NotServing(f"{address} did not become SERVING within {timeout:.0f}s")


def exit_status(pid: int) -> Callable[[], int | None]:
    """For a process this one did not start: None while it runs, else -1 (its code is its
    parent's to read). A zombie (exited, not yet reaped) has ended."""

    def poll() -> int | None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -1
        except PermissionError:
            return None
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None
        return -1 if state == "Z" else None

    return poll


def stop_process(proc: subprocess.Popen | None, grace: float = 30.0) -> None:
    """SIGTERM (the servers drain), then SIGKILL after ``grace`` seconds."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
