"""Translation through a pivot, scored: John (the Bible's test book) between two non-English
languages, through the server's own path (``bulk.local.LocalClient``: sentence splitting,
placeholders, the pivot's two legs), against the same verses in the target language.

    python -m bench.pivot_eval --package packages/default --directions de-fr,fr-es

Prints a markdown table: per direction the route (through which language), sacrebleu's
corpus BLEU and chrF, and lines/s; ``--json`` keeps scores and outputs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import sacrebleu

from bulk.local import LocalClient
from cli import ArgumentParser, parse_direction
from corpus.bible import bible_pairs
from engine.defaults import BEAM_SIZE

BATCH = 32  # texts per call, as a file client sends them


async def translate_all(client: LocalClient, texts: list[str], source: str, target: str, beam: int) -> list[str]:
    out: list[str] = []
    for i in range(0, len(texts), BATCH):
        got = await client.translate(texts[i:i + BATCH], source, target, beam_size=beam)
        out.extend(t.text for t in got)
    return out


def route_of(client: LocalClient, source: str, target: str) -> str:
    """"direct", or "via xx" as the server routes the pair."""
    way = client.service.route("", source, target)
    return f"via {way.via}" if way.via else "direct"


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", default="packages/default")
    p.add_argument("--directions", default="de-fr,fr-es", help="comma-separated, e.g. de-fr,fr-es")
    p.add_argument("--beam", type=int, default=1, help=f"beam size (1: greedy, as the model card's scores; "
                                                       f"the server's default is {BEAM_SIZE})")
    p.add_argument("--limit", type=int, default=0, help="the first N verses of each direction (0: all)")
    p.add_argument("--no-int8", dest="int8", action="store_false", help="fp32 graphs instead of int8")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, help="write scores and outputs here")
    args = p.parse_args(argv)
    directions = [d.strip() for d in args.directions.split(",") if d.strip()]
    for d in directions:
        parse_direction(d)
    client = LocalClient(args.package, threads=args.threads, int8=args.int8)
    report = {}
    try:
        print("| direction | route | verses | BLEU | chrF | lines/s |\n|---|---|---:|---:|---:|---:|")
        for d in directions:
            source, target = parse_direction(d)
            pairs = bible_pairs([d], "test")
            pairs = pairs[:args.limit] if args.limit else pairs
            start = time.perf_counter()
            hyps = asyncio.run(translate_all(client, [x.src for x in pairs], source, target, args.beam))
            seconds = time.perf_counter() - start
            refs = [x.tgt for x in pairs]
            bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
            chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
            route = route_of(client, source, target)
            print(f"| {d} | {route} | {len(pairs)} | {bleu:.1f} | {chrf:.1f} | {len(pairs) / seconds:.1f} |",
                  flush=True)
            report[d] = {"route": route, "verses": len(pairs), "bleu": bleu, "chrf": chrf,
                         "seconds": seconds, "outputs": hyps}
    finally:
        client.close()
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
