"""nmt-bulk with 1 and 2 actors against nmt-translate through a server, on one file, side by side.

    python -m bench.load.bulk_compare --package packages/default --lines 20000 --beam 1 --int8

Writes LINES verses of the World English Bible (training books, cycled if needed) to a file, then runs, one
after another on the same machine: ``nmt-serve`` (``--threads``, ``--int8`` as given) with
``nmt-translate -i FILE -o OUT`` (its defaults: 32 lines a request, 4 in flight), and
``nmt-bulk`` with 1 actor and with 2 actors (``--threads`` each). Prints each one's wall time
and rows/s (from the start of the process: the server's start-up until it reports SERVING,
Ray's start-up and the actors' model loading are all included), the ratio to nmt-translate,
and whether each output is byte-identical to nmt-translate's. Markdown table on stdout; ``--json`` keeps it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cli import free_port
from corpus.bible import clean, load_bible, split_of


def verses(n: int) -> list[str]:
    texts = [clean(t) for k, t in sorted(load_bible("4").items()) if split_of(k) == "train"]
    texts = [t for t in texts if t]
    return [texts[i % len(texts)] for i in range(n)]


def timed(cmd: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", default="packages/default")
    p.add_argument("--lines", type=int, default=20000)
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="de")
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads of the server and of each actor")
    p.add_argument("--int8", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    bindir = Path(sys.executable).parent
    variant = ["--int8"] if args.int8 else []  # nmt-bulk serves fp32 without it; nmt-serve needs --no-int8
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        src = d / "in.txt"
        src.write_text("\n".join(verses(args.lines)) + "\n", encoding="utf-8")
        rows = []
        port = free_port()
        start = time.monotonic()
        server = subprocess.Popen([str(bindir / "nmt-serve"), "--model", f"default={args.package}", "--port",
                                   str(port), "--threads", str(args.threads), "--device", "cpu", "--metrics-port",
                                   "-1", *(variant or ["--no-int8"])], stderr=subprocess.DEVNULL)
        try:
            translate = [str(bindir / "nmt-translate"), "--address", f"127.0.0.1:{port}", "-s", args.source, "-t",
                         args.target, "-i", str(src), "-o", str(d / "translate.txt"), "--beam", str(args.beam), "-q",
                         "--timeout", "600"]
            health = [str(bindir / "nmt-health"), "--address", f"127.0.0.1:{port}", "--timeout", "2"]
            while subprocess.run(health, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
                if server.poll() is not None:
                    raise SystemExit("nmt-serve exited before it served")
                time.sleep(0.2)
            subprocess.run(translate, check=True)
            seconds = time.monotonic() - start
        finally:
            server.terminate()
            server.wait(60)
        reference = (d / "translate.txt").read_bytes()
        rows.append({"system": f"nmt-serve + nmt-translate ({args.threads} thread(s))", "seconds": seconds,
                     "identical": True})
        for actors in (1, 2):
            out = d / f"bulk{actors}.txt"
            seconds = timed([str(bindir / "nmt-bulk"), str(src), "-o", str(out), "-s", args.source, "-t",
                             args.target, "--package", args.package, "--actors", str(actors), "--threads",
                             str(args.threads), "--beam", str(args.beam), "-q", *variant])
            rows.append({"system": f"nmt-bulk, {actors} actor(s) x {args.threads} thread(s)", "seconds": seconds,
                         "identical": out.read_bytes() == reference})
    base = rows[0]["seconds"]
    print(f"{args.lines} lines {args.source}->{args.target}, beam {args.beam}, {'int8' if args.int8 else 'fp32'}, "
          f"output sha256 {hashlib.sha256(reference).hexdigest()[:12]}")
    print("| system | seconds | rows/s | vs nmt-translate | output identical |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        r["rows_per_s"] = args.lines / r["seconds"]
        print(f"| {r['system']} | {r['seconds']:.1f} | {r['rows_per_s']:.1f} | {base / r['seconds']:.2f}x | "
              f"{'yes' if r['identical'] else 'NO'} |")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    return 0 if all(r["identical"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
