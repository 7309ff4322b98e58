"""Connection floods: tens of thousands of idle TCP connections to the gRPC and HTTP ports
while real requests go on.

    python -m bench.load.flood --package packages/default --connections 20000 --seconds 90

One ``nmt-serve`` (``server/child.py``) and one ``nmt-http`` in front of it
(``bench/load/gateway_load.py``), both with their default connection limits. Flooder
processes (each under its own open-files limit, so several of them) open ``--connections``
idle TCP connections to each port, send nothing, and reopen each one the server closes,
for ``--seconds``. Meanwhile a prober, once a second, translates one sentence through gRPC
and one through HTTP (``/translate``) and asks gRPC health and the gateway's ``/readyz``.
Reported: the prober's answers and latencies, how the floods' connections ended (refused,
closed by the server, open at the end), open files and RSS of both processes before,
at the peak and after the flood, and how many log lines each wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.pool
import resource
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.load.gateway_load import GatewayProcess
from bench.load.hostile import open_fds as open_files
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc
from server.child import ServerProcess, process_rss_mib

RECONNECT_SECONDS = 0.5  # a flooder reopens a closed or refused connection after this
PER_PROCESS = 9000  # connections one flooder holds at most (its open-files limit leaves room)


async def _hold(port: int, n: int, until: float) -> Counter:
    outcomes: Counter = Counter()

    async def one() -> None:
        while time.monotonic() < until:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                outcomes["refused"] += 1
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            outcomes["opened"] += 1
            try:
                while await asyncio.wait_for(reader.read(4096), max(until - time.monotonic(), 0.1)):
                    pass  # the server's greeting; read on until it closes
                outcomes["closed by the server"] += 1
            except (TimeoutError, ConnectionError):
                outcomes["open at the end"] += 1
            writer.close()
            await asyncio.sleep(RECONNECT_SECONDS)

    await asyncio.gather(*(one() for _ in range(n)))
    return outcomes


def flooder(port: int, n: int, until: float, queue: multiprocessing.Queue) -> None:
    """A process holding ``n`` idle connections to ``port`` until the monotonic time ``until``."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    queue.put((port, dict(asyncio.run(_hold(port, n, until)))))


def probe(grpc_address: str, http_url: str, until: float) -> dict:
    """Once a second until ``until``: a translation and a health check on each side."""
    stub = pb_grpc.TranslatorStub(grpc.insecure_channel(grpc_address))
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(grpc_address))
    results: dict[str, list] = {"grpc translate": [], "http translate": [], "grpc health": [], "http readyz": []}
    body = json.dumps({"q": "Jesus wept.", "source": "en", "target": "de"}).encode()
    while time.monotonic() < until:
        tick = time.monotonic()
        for name, call in (
            ("grpc translate", lambda: stub.Translate(pb.TranslateRequest(texts=["Jesus wept."], source_lang="en",
                                                                         target_lang="de"), timeout=10)),
            ("grpc health", lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=5)),
            ("http translate", lambda: urllib.request.urlopen(urllib.request.Request(
                f"{http_url}/translate", body, {"Content-Type": "application/json"}), timeout=10).read()),
            ("http readyz", lambda: urllib.request.urlopen(f"{http_url}/readyz", timeout=5).read()),
        ):
            began = time.monotonic()
            try:
                call()
                results[name].append(time.monotonic() - began)
            except Exception as e:  # counted and named, never raised
                results[name].append(f"{type(e).__name__}: {str(e)[:80]}")
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    return results


def summary(values: list) -> dict:
    ok = sorted(v for v in values if isinstance(v, float))
    failed = Counter(v for v in values if not isinstance(v, float))
    pick = (lambda q: round(ok[min(len(ok) - 1, int(q * len(ok)))] * 1000, 1)) if ok else (lambda q: None)
    return {"ok": len(ok), "failed": sum(failed.values()), "errors": dict(failed), "p50_ms": pick(0.5),
            "p99_ms": pick(0.99), "max_ms": pick(1.0)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.load.flood", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", default="packages/default")
    p.add_argument("--connections", type=int, default=20000, help="idle connections to each port")
    p.add_argument("--seconds", type=float, default=90.0, help="how long the flood lasts")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="flood-"))
    with ServerProcess(args.package, threads=1, log=logs / "server.log") as server, \
            GatewayProcess(server.address, log=logs / "gateway.log") as gateway:
        pids = {"server": server.pid, "gateway": gateway.proc.pid}
        ports = {"grpc": server.port, "http": gateway.port}
        before = {k: {"open_files": open_files(pid), "rss_mib": round(process_rss_mib(pid, "VmRSS"), 1)}
                  for k, pid in pids.items()}
        queue: multiprocessing.Queue = multiprocessing.Queue()
        until = time.monotonic() + args.seconds
        workers = []
        for port in ports.values():
            left = args.connections
            while left > 0:
                n = min(left, PER_PROCESS)
                workers.append(multiprocessing.Process(target=flooder, args=(port, n, until, queue), daemon=True))
                left -= n
        for w in workers:
            w.start()
        print(f"{len(workers)} flooders, {args.connections} idle connections to each of gRPC :{ports['grpc']} and "
              f"HTTP :{ports['http']}, {args.seconds:g} s", flush=True)
        peak = {k: {"open_files": 0, "rss_mib": 0.0} for k in pids}
        prober = multiprocessing.pool.ThreadPool(1).apply_async(probe, (server.address, gateway.url, until))
        while time.monotonic() < until:
            for k, pid in pids.items():
                peak[k]["open_files"] = max(peak[k]["open_files"], open_files(pid))
                peak[k]["rss_mib"] = max(peak[k]["rss_mib"], round(process_rss_mib(pid, "VmRSS"), 1))
            time.sleep(1.0)
        probed = prober.get(timeout=60)
        floods: dict[str, Counter] = {name: Counter() for name in ports}
        for _ in workers:
            port, outcome = queue.get(timeout=120)
            floods["grpc" if port == ports["grpc"] else "http"].update(outcome)
        for w in workers:
            w.join(30)
        time.sleep(5.0)  # the servers notice the closed connections
        after = {k: {"open_files": open_files(pid), "rss_mib": round(process_rss_mib(pid, "VmRSS"), 1)}
                 for k, pid in pids.items()}
    lines = {k: len((logs / f"{k}.log").read_text(errors="replace").splitlines()) for k in pids}
    result = {"connections_per_port": args.connections, "seconds": args.seconds,
              "probe": {k: summary(v) for k, v in probed.items()}, "floods": {k: dict(v) for k, v in floods.items()},
              "before": before, "peak": peak, "after": after, "log_lines": lines}
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if all(s["failed"] == 0 for s in result["probe"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
