"""Keep a steady load on a deployment while it changes (a rolling update), and count every failure.

    python scripts/steady_load.py --address 127.0.0.1:50051 --http-port 5000 --stop-file /tmp/stop

Closed-loop workers send one request after another until --stop-file appears (or --max-seconds
pass): gRPC Translate calls to --address and, with --http-port, LibreTranslate /translate calls
to the HTTP gateway on 127.0.0.1. Nothing is retried (gRPC's own retries are off): a request a
replica refused while draining counts as a failure, as a bare client would see it. Prints one
JSON summary (requests by outcome per protocol, the first errors, seconds) and exits 1 when any
request failed or none succeeded. Used by scripts/swarm_e2e.sh around `docker service update`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import grpc

from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc

SENTENCES = ("Please restart your computer before installing the update.",
             "In the beginning God created the heavens and the earth.",
             "Click OK to close the dialog.", "Jesus wept.")
TIMEOUT = 60.0  # seconds per request: a slow answer under load is not a failure, a lost one is


class Tally:
    """Outcomes by protocol, shared by the workers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, Counter] = {"grpc": Counter(), "http": Counter()}
        self.errors: list[str] = []

    def add(self, protocol: str, outcome: str, error: str = "") -> None:
        with self.lock:
            self.counts[protocol][outcome] += 1
            if error and len(self.errors) < 10:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {protocol}: {error}")


def grpc_worker(address: str, source: str, target: str, stop: threading.Event, tally: Tally, n: int) -> None:
    channel = grpc.insecure_channel(address, options=[("grpc.enable_retries", 0)])
    stub = pb_grpc.TranslatorStub(channel)
    i = n
    while not stop.is_set():
        request = pb.TranslateRequest(texts=[SENTENCES[i % len(SENTENCES)]], source_lang=source, target_lang=target,
                                      options=pb.DecodingOptions(beam_size=1))
        i += 1
        try:
            answer = stub.Translate(request, timeout=TIMEOUT)
            ok = len(answer.translations) == 1 and bool(answer.translations[0].hypotheses[0].text)
            tally.add("grpc", "OK" if ok else "EMPTY", "" if ok else "an empty translation")
        except grpc.RpcError as e:
            tally.add("grpc", e.code().name, f"{e.code().name}: {e.details()}")
    channel.close()


def http_worker(port: int, source: str, target: str, stop: threading.Event, tally: Tally, n: int) -> None:
    i = n
    while not stop.is_set():
        body = json.dumps({"q": SENTENCES[i % len(SENTENCES)], "source": source, "target": target}).encode()
        i += 1
        request = urllib.request.Request(f"http://127.0.0.1:{port}/translate", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as r:
                ok = bool(json.load(r).get("translatedText"))
            tally.add("http", "200" if ok else "EMPTY", "" if ok else "an empty translatedText")
        except urllib.error.HTTPError as e:
            tally.add("http", str(e.code), f"{e.code}: {e.read()[:200].decode(errors='replace')}")
        except OSError as e:  # refused, reset, timed out
            tally.add("http", type(e).__name__, str(e))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", required=True, help="HOST:PORT of the gRPC service (the balancer)")
    p.add_argument("--http-port", type=int, help="port of the HTTP gateway on 127.0.0.1 (default: no HTTP load)")
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="de")
    p.add_argument("--workers", type=int, default=2, help="concurrent clients per protocol (default: %(default)s)")
    p.add_argument("--stop-file", type=Path, required=True, help="stop once this file exists")
    p.add_argument("--max-seconds", type=float, default=600, help="stop after this long anyway (default: %(default)s)")
    args = p.parse_args()
    if args.workers < 1:
        p.error(f"--workers is {args.workers}; it must be at least 1")
    stop, tally = threading.Event(), Tally()
    threads = [threading.Thread(target=grpc_worker, args=(args.address, args.source, args.target, stop, tally, n))
               for n in range(args.workers)]
    if args.http_port:
        threads += [threading.Thread(target=http_worker,
                                     args=(args.http_port, args.source, args.target, stop, tally, n))
                    for n in range(args.workers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    while not args.stop_file.exists() and time.monotonic() - started < args.max_seconds:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    good = {"grpc": "OK", "http": "200"}
    failed = sum(n for proto, c in tally.counts.items() for outcome, n in c.items() if outcome != good[proto])
    succeeded = sum(tally.counts[proto][good[proto]] for proto in tally.counts)
    print(json.dumps({"seconds": round(time.monotonic() - started, 1),
                      "requests": {proto: dict(c) for proto, c in tally.counts.items() if c},
                      "failed": failed, "first_errors": tally.errors}, indent=1))
    return 0 if failed == 0 and succeeded > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
