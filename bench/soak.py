"""Soak: many clients for minutes against ``nmt-serve`` with normal and hostile calls mixed.

    python -m bench.soak --package packages/default --clients 64 --minutes 10

Each client loops over a random mix of calls:

- ``normal``: 1-8 sentences, greedy or beam 4, a 60 s deadline (OK, or RESOURCE_EXHAUSTED
  when the queue is full: 64 clients with streams offer more than one CPU core decodes);
- ``short-deadline``: 1-8 sentences with a 20-300 ms deadline (OK, DEADLINE_EXCEEDED or busy);
- ``stream``: a TranslateStream of 4-12 requests read to the end (OK, one answer per request);
- ``stream-cancel``: a TranslateStream of 20 requests cancelled after its first answer (CANCELLED);
- ``malformed``: bytes that are not a TranslateRequest (INVALID_ARGUMENT);
- ``invalid``: an unsupported language pair (INVALID_ARGUMENT).

It prints calls by kind and status code, latency p50/p99 of each kind, the server's RSS over
time (and a plot with ``--plot``), and then checks what must hold after any load: every
call got exactly one answer (the server's count of answered calls per method equals the
calls the clients made), every completed stream answered each of its requests once, no call
got a code its kind cannot explain, and the in-flight and queue gauges returned to 0.
Exit status 0 when all hold, 1 otherwise. ``--json`` keeps the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import sys
import time
import urllib.request
from pathlib import Path

import grpc

from bench.server_load import ServerProcess, free_port, process_rss_mib
from clients.loadtest import percentile
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc

DATA = Path(__file__).resolve().parent / "data" / "modern.tsv"
MIX = {"normal": 50, "short-deadline": 20, "stream": 10, "stream-cancel": 8, "malformed": 7, "invalid": 5}
EXPECTED = {  # the codes each kind of call may end with (RESOURCE_EXHAUSTED: the queue is full, "busy")
    "normal": {"OK", "RESOURCE_EXHAUSTED"},
    "short-deadline": {"OK", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"},
    "stream": {"OK"},
    "stream-cancel": {"CANCELLED"},
    "malformed": {"INVALID_ARGUMENT"},
    "invalid": {"INVALID_ARGUMENT"},
}
METHOD = {"normal": "Translate", "short-deadline": "Translate", "stream": "TranslateStream",
          "stream-cancel": "TranslateStream", "malformed": "Translate", "invalid": "Translate"}


def sentences(path: Path = DATA) -> list[str]:
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:] if line.strip()]
    return [r[0] for r in rows]


class Tally:
    def __init__(self) -> None:
        self.codes: collections.Counter[tuple[str, str]] = collections.Counter()
        self.latency: dict[str, list[float]] = collections.defaultdict(list)
        self.stream_mismatches = 0  # completed streams whose answers were not one per request

    def add(self, kind: str, code: str, seconds: float) -> None:
        self.codes[kind, code] += 1
        self.latency[kind].append(seconds)


def request(rng: random.Random, pool: list[str], **options) -> pb.TranslateRequest:
    return pb.TranslateRequest(texts=rng.sample(pool, rng.randint(1, 8)), source_lang="en", target_lang="de",
                               options=pb.DecodingOptions(**options))


async def one_call(kind: str, stub: pb_grpc.TranslatorStub, raw, rng: random.Random, pool: list[str],
                   tally: Tally) -> None:
    start = time.monotonic()
    code = "OK"
    try:
        if kind == "normal":
            await stub.Translate(request(rng, pool, beam_size=rng.choice((1, 1, 4))), timeout=60)
        elif kind == "short-deadline":
            await stub.Translate(request(rng, pool), timeout=rng.uniform(0.02, 0.3))
        elif kind == "invalid":
            await stub.Translate(pb.TranslateRequest(texts=["Hello"], source_lang="en", target_lang="xx"), timeout=60)
        elif kind == "malformed":
            await raw(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64))) + b"\xff\xff\xff\xff", timeout=60)
        elif kind == "stream":
            n = rng.randint(4, 12)
            requests = [request(rng, pool) for _ in range(n)]
            for i, r in enumerate(requests):
                r.request_id = str(i)
            ids = [a.request_id async for a in stub.TranslateStream(iter(requests), timeout=120)]
            if sorted(ids, key=int) != [str(i) for i in range(n)]:
                tally.stream_mismatches += 1
        elif kind == "stream-cancel":
            call = stub.TranslateStream(iter([request(rng, pool, beam_size=4) for _ in range(20)]), timeout=120)
            await call.read()
            call.cancel()
            code = "CANCELLED"
    except grpc.aio.AioRpcError as e:
        code = e.code().name
    except asyncio.CancelledError:
        code = "CANCELLED"
    tally.add(kind, code, time.monotonic() - start)


async def client(address: str, until: float, seed: int, pool: list[str], tally: Tally) -> None:
    rng = random.Random(seed)
    kinds, weights = zip(*MIX.items())
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.TranslatorStub(channel)
        raw = channel.unary_unary("/nmt.v1.Translator/Translate")
        while time.monotonic() < until:
            await one_call(rng.choices(kinds, weights)[0], stub, raw, rng, pool, tally)


def scrape(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def answered_calls(m: dict[str, float]) -> collections.Counter[str]:
    """Calls the server answered, by method (from ``nmt_requests_total``)."""
    answered: collections.Counter[str] = collections.Counter()
    for key, value in m.items():
        if key.startswith("nmt_requests_total{"):
            labels = dict(part.split("=") for part in key[len("nmt_requests_total{"):-1].split(","))
            if labels["method"].strip('"') != "ListModels":
                answered[labels["method"].strip('"')] += int(value)
    return answered


async def soak(args: argparse.Namespace) -> dict:
    metrics_port = free_port()
    pool = sentences()
    tally = Tally()
    rss: list[tuple[float, float]] = []
    with ServerProcess(args.package, args.threads, extra=["--metrics-port", str(metrics_port), "--metrics-host",
                                                          "127.0.0.1", *(["--int8"] if args.int8 else [])]) as srv:
        start = time.monotonic()
        until = start + args.minutes * 60
        clients = [asyncio.create_task(client(srv.address, until, args.seed + i, pool, tally))
                   for i in range(args.clients)]
        while not all(c.done() for c in clients):
            rss.append((time.monotonic() - start, process_rss_mib(srv.pid, "VmRSS")))
            done = sum(tally.codes.values())
            print(f"\r{rss[-1][0]:6.0f}s  {done:8,d} calls  RSS {rss[-1][1]:6.0f} MiB", end="", file=sys.stderr,
                  flush=True)
            await asyncio.wait(clients, timeout=args.sample_seconds)
        print(file=sys.stderr)
        await asyncio.gather(*clients)
        seconds = time.monotonic() - start
        made = collections.Counter()
        for (kind, _), n in tally.codes.items():
            made[METHOD[kind]] += n
        # A client stops waiting at its deadline or cancel; the server may finish its side of
        # that call a moment later: give it up to 15 s to settle, then read its view.
        settle_until = time.monotonic() + 15
        while True:
            m = await asyncio.to_thread(scrape, metrics_port)
            answered = answered_calls(m)
            settled = all(v == 0 for k, v in m.items()
                          if k.startswith(("nmt_in_flight_sequences{", "nmt_queued_texts{")))
            if (settled and answered == made) or time.monotonic() > settle_until:
                break
            await asyncio.sleep(0.2)
        rss.append((time.monotonic() - start, process_rss_mib(srv.pid, "VmRSS")))
    unexpected = {f"{k}:{c}": n for (k, c), n in tally.codes.items() if c not in EXPECTED[k]}
    # A call whose deadline passes before grpc hands it to the server is never seen there:
    # only short-deadline calls that expired may be missing from the server's count.
    unseen = sum(made.values()) - sum(answered.values())
    checks = {
        "no call answered twice (server count <= client count, per method)":
            all(answered[method] <= made[method] for method in made),
        "every call the server saw was answered (only expired short-deadline calls unseen)":
            0 <= unseen <= tally.codes["short-deadline", "DEADLINE_EXCEEDED"],
        "every completed stream answered each request once": tally.stream_mismatches == 0,
        "no unexpected status codes": not unexpected,
        "in-flight and queue gauges back to 0": settled,
    }
    return {
        "clients": args.clients, "seconds": round(seconds, 1), "calls": sum(tally.codes.values()),
        "codes": {f"{k} {c}": n for (k, c), n in sorted(tally.codes.items())},
        "latency_ms": {k: {"p50": round(1000 * percentile(sorted(v), 50), 1),
                           "p99": round(1000 * percentile(sorted(v), 99), 1),
                           "n": len(v)} for k, v in sorted(tally.latency.items())},
        "calls_by_method": {"clients": dict(made), "server": dict(answered)}, "unseen_by_server": unseen,
        "server_codes": {k[len("nmt_requests_total{"):-1]: int(v) for k, v in m.items()
                         if k.startswith("nmt_requests_total{")},
        "unexpected": unexpected, "rss_mib": [(round(t, 1), round(r, 1)) for t, r in rss],
        "checks": checks,
    }


def report(r: dict) -> str:
    lines = [f"{r['calls']:,} calls from {r['clients']} clients in {r['seconds']:.0f} s "
             f"({r['calls'] / max(r['seconds'], 1e-9):.1f} calls/s)", "", f"{'kind':<16}{'code':<20}{'calls':>8}"]
    lines += [f"{k.split()[0]:<16}{k.split()[1]:<20}{n:>8,d}" for k, n in r["codes"].items()]
    lines += ["", f"{'kind':<16}{'p50 ms':>10}{'p99 ms':>10}"]
    lines += [f"{k:<16}{v['p50']:>10.1f}{v['p99']:>10.1f}" for k, v in r["latency_ms"].items()]
    rss = [m for _, m in r["rss_mib"]]
    lines += ["", f"server RSS: start {rss[0]:.0f} MiB, peak {max(rss):.0f} MiB, end {rss[-1]:.0f} MiB",
              f"calls by method (clients / server): {r['calls_by_method']['clients']} / "
              f"{r['calls_by_method']['server']}", ""]
    lines += [f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in r["checks"].items()]
    if r["unexpected"]:
        lines.append(f"unexpected codes: {r['unexpected']}")
    return "\n".join(lines)


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, m = zip(*r["rss_mib"])
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(t, m)
    ax.set_xlabel("seconds")
    ax.set_ylabel("server RSS (MiB)")
    ax.set_ylim(0, max(m) * 1.15)
    ax.set_title(f"soak: {r['clients']} clients, {r['calls']:,} calls")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", default="packages/default")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--threads", type=int, default=1, help="the server's onnxruntime threads")
    p.add_argument("--int8", action="store_true", help="serve the int8 graphs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-seconds", type=float, default=5.0, help="how often the server's RSS is read")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--plot", type=Path, help="write the RSS-over-time plot here (PNG)")
    args = p.parse_args(argv)
    r = asyncio.run(soak(args))
    print(report(r))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(r, indent=2) + "\n")
    if args.plot:
        plot(r, args.plot)
    return 0 if all(r["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
