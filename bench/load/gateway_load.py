"""What the HTTP gateway costs: requests/s and latency through ``nmt-http`` against straight
gRPC to the same server, at the same concurrency, in one run.

    python -m bench.load.gateway_load --package packages/default --int8 --clients 1,8,32 --requests 256

One ``nmt-serve`` (subprocess, 127.0.0.1) and one ``nmt-http`` in front of it. For each
client count, closed-loop clients send the same single-sentence requests (the first
``--requests`` en-de test verses, one text each, translated as one sentence) first straight
to the server over gRPC, then through the gateway's native JSON endpoint (``/v1/translate``,
the same options), and again in the other order; each side keeps its faster pass. Reported:
requests/s of each, their ratio, p50/p99 latency of each and what the gateway adds. Both
client sides run as asyncio tasks in this one process (grpc.aio and httpx).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.load.replay import Request, run_load
from cli import free_port
from corpus.bible import bible_pairs
from server.child import ROOT, ServerProcess, stop_process


class GatewayProcess:
    """``with GatewayProcess(grpc_address) as gw:`` -> an ``nmt-http`` answering on ``gw.url``."""

    def __init__(self, grpc_address: str, start_timeout: float = 60.0, log: Path | None = None) -> None:
        self.port = free_port()
        self.log = log  # its stderr goes here (default: this process's)
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "gateway.main", "--grpc-address", grpc_address, "--host", "127.0.0.1",
                     "--port", str(self.port), "--log-level", "WARNING"]
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> GatewayProcess:
        stderr = self.log.open("ab") if self.log else None
        self.proc = subprocess.Popen(self.args, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stderr=stderr)
        if stderr:
            stderr.close()  # the child holds its own copy
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nmt-http exited with code {self.proc.returncode} before answering")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.__exit__()
        raise TimeoutError(f"nmt-http was not ready within {self.start_timeout:.0f}s")

    def __exit__(self, *exc: object) -> None:
        stop_process(self.proc)


async def _http_load(url: str, requests: Sequence[Request], concurrency: int) -> tuple[float, list[float], list[str]]:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=3600) as client:

        def body(r: Request) -> dict:
            return {"q": r.texts, "source": r.source_lang, "target": r.target_lang, "no_sentence_split": True}

        (await client.post("/v1/translate", json=body(requests[0]))).raise_for_status()  # warm-up
        todo = list(range(len(requests)))[::-1]
        latencies = [0.0] * len(requests)
        texts = [""] * len(requests)

        async def one_client() -> None:
            while todo:
                i = todo.pop()
                t0 = time.perf_counter()
                answer = await client.post("/v1/translate", json=body(requests[i]))
                latencies[i] = time.perf_counter() - t0
                answer.raise_for_status()
                texts[i] = answer.json()["translations"][0]["hypotheses"][0]["text"]

        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
        return time.perf_counter() - start, latencies, texts


def measure(server: ServerProcess, gateway: GatewayProcess, requests: list[Request], clients: int) -> dict:
    """Both sides twice, alternating (gRPC, HTTP, HTTP, gRPC); the faster pass of each."""
    grpc_runs, http_runs = [], []
    for order in (("grpc", "http"), ("http", "grpc")):
        for side in order:
            if side == "grpc":
                r = run_load(server.address, requests, clients)
                texts = [resp.translations[0].hypotheses[0].text for resp in r.responses]
                grpc_runs.append((r.seconds, r.latencies, texts))
            else:
                http_runs.append(asyncio.run(_http_load(gateway.url, requests, clients)))
    (g_seconds, g_lat, g_texts), (h_seconds, h_lat, h_texts) = min(grpc_runs), min(http_runs)
    n = len(requests)
    g50, g99 = (float(np.percentile(g_lat, q)) * 1000 for q in (50, 99))
    h50, h99 = (float(np.percentile(h_lat, q)) * 1000 for q in (50, 99))
    return {"clients": clients, "requests": n, "grpc_rps": n / g_seconds, "http_rps": n / h_seconds,
            "ratio": g_seconds / h_seconds, "grpc_p50_ms": g50, "grpc_p99_ms": g99, "http_p50_ms": h50,
            "http_p99_ms": h99, "added_p50_ms": h50 - g50, "added_p99_ms": h99 - g99,
            "same_texts": sum(a == b for a, b in zip(g_texts, h_texts)) / n}


def table(rows: list[dict]) -> str:
    lines = ["| clients | gRPC req/s | HTTP req/s | HTTP / gRPC | gRPC p50 / p99 ms | HTTP p50 / p99 ms | "
             "added p50 / p99 ms | same texts |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['clients']} | {r['grpc_rps']:.1f} | {r['http_rps']:.1f} | {r['ratio']:.2f}x | "
                     f"{r['grpc_p50_ms']:.1f} / {r['grpc_p99_ms']:.1f} | {r['http_p50_ms']:.1f} / "
                     f"{r['http_p99_ms']:.1f} | {r['added_p50_ms']:+.1f} / {r['added_p99_ms']:+.1f} | "
                     f"{r['same_texts']:.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.load.gateway_load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", required=True, help="the model package to serve")
    p.add_argument("--int8", action="store_true", help="serve the int8 graphs")
    p.add_argument("--threads", type=int, default=1, help="server onnxruntime threads (default 1)")
    p.add_argument("--clients", default="1,8,32", help="comma-separated client counts (default 1,8,32)")
    p.add_argument("--requests", type=int, default=256, help="requests per pass (default 256)")
    p.add_argument("--json", dest="out", type=Path, default=ROOT / "bench" / "results" / "gateway_load.json",
                   help="where to write the results (a Markdown table beside it)")
    args = p.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    pairs = bible_pairs(("en-de",), "test")[: args.requests]
    requests = [Request([pair.src], "en", "de") for pair in pairs]
    extra = ["--int8" if args.int8 else "--no-int8"]  # nmt-serve's own default is int8
    rows = []
    with ServerProcess(args.package, args.threads, extra=extra) as server, GatewayProcess(server.address) as gw:
        for c in clients:
            rows.append(measure(server, gw, requests, c))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    out = {"command": " ".join(["python -m bench.load.gateway_load", *(argv if argv is not None else sys.argv[1:])]),
           "package": str(args.package), "int8": args.int8, "threads": args.threads, "rows": rows,
           "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table(rows) + "\n")
    print(table(rows))
    print(f"results: {args.out} (table: {args.out.with_suffix('.md')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
