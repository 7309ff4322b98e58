"""``python -m bench.gate``: the quality gate's scores of the shipped model, served as people get it.

The gate (tests/test_default_model.py) sends three fixed sets, defined here once, through a real
``nmt-serve`` (sentence split, placeholders, scheduler, batching, greedy decoding, int8 graphs):

- ``john``: the first ``GATE_VERSES`` verses of John's test split per direction (BLEU);
- ``help``: 40 paragraphs per language of the LibreOffice help's test split
  (tests/data/libreoffice-gate.tsv, written by ``python -m corpus.build --sample``), each used
  both ways (chrF);
- ``everyday``: the 253 phrases of bench/data/everyday.tsv in all six directions (chrF).

The test's floors (``floors``) sit ``FLOOR_MARGIN`` points under the lower of what the two int8
widths scored when the model was shipped: 8-bit weights (``int8w8``, what a CPU with VNNI or AMX
serves) and 7-bit ones (``int8``, any x86 CPU). The card (models/default/README.md) records the
lower in its "Quality gate" table, and the test reads them there (``shipped_scores``). This
prints both widths and the lower as that table, so anyone can set the floors again:

    python -m bench.gate                                   # both widths this CPU can run
    python -m bench.gate --int8-graphs int8 --json gate.json
    python -m bench.gate --package packages/default        # an exported package instead of models/default

A CPU without VNNI or AMX runs only ``int8``: nmt-serve refuses 8-bit weights there.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import sacrebleu

from cli import parse_direction

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "models" / "default"
MODERN_GATE = ROOT / "tests" / "data" / "libreoffice-gate.tsv"
GATE_VERSES = 60
HELP_PARAGRAPHS = 40  # per language, each used both ways
EVERYDAY_PHRASES = 253
SETS = ("john", "help", "everyday")
METRIC = {"john": "BLEU", "help": "chrF", "everyday": "chrF"}
CHUNK = 64  # texts per request: within nmt-serve's default --max-texts
FLOOR_MARGIN = 2.0  # the test fails this many points under the shipped score
# The model card's "Quality gate" table holds each set's shipped scores, one row per set: the one
# record of them, which the test reads its floors from and this prints for the next ship.
CARD = DEFAULT_MODEL / "README.md"
CARD_SECTION = "### Quality gate"
CARD_NAMES = {"john": "Bible", "help": "help", "everyday": "everyday"}  # the card's word for each set
CARD_ROWS = {name: f"{CARD_NAMES[name]} {METRIC[name]}" for name in SETS}  # "Bible BLEU", "help chrF", ...

Sets = dict[str, tuple[list[str], list[str]]]  # direction -> (sources, references)


def john_set(model: Path = DEFAULT_MODEL) -> Sets:
    """The first GATE_VERSES verses of John's test split in each of the model's directions."""
    from corpus.bible import bible_pairs
    from training.config import RunConfig

    cfg = RunConfig.load(model / "config.json")
    out: Sets = {}
    for pair in bible_pairs(cfg.data.directions, "test", cfg.data.versions):
        sources, refs = out.setdefault(pair.direction, ([], []))
        if len(sources) < GATE_VERSES:
            sources.append(pair.src)
            refs.append(pair.tgt)
    return out


def help_set() -> Sets:
    out: Sets = {}
    for line in MODERN_GATE.read_text(encoding="utf-8").splitlines():
        lang, _, en, xx = line.split("\t")
        for direction, src, tgt in ((f"en-{lang}", en, xx), (f"{lang}-en", xx, en)):
            sources, refs = out.setdefault(direction, ([], []))
            sources.append(src)
            refs.append(tgt)
    return out


def everyday_set(directions: Sequence[str]) -> Sets:
    """The phrase list (bench.modern_eval reads it) in each of ``directions``."""
    from bench.modern_eval import everyday_table

    rows = list(everyday_table().values())
    out: Sets = {}
    for direction in directions:
        src, tgt = parse_direction(direction)
        out[direction] = ([r[src] for r in rows], [r[tgt] for r in rows])
    return out


def gate_sets(model: Path = DEFAULT_MODEL) -> dict[str, Sets]:
    john = john_set(model)
    return {"john": john, "help": help_set(), "everyday": everyday_set(sorted(john))}


def translate(stub, texts: Sequence[str], direction: str, model: str = "") -> list[str]:
    """Each text's best translation from a Translator stub, greedy (the server's default), CHUNK
    texts a request."""
    from nmt.v1 import translator_pb2 as pb

    src, tgt = parse_direction(direction)
    out: list[str] = []
    for i in range(0, len(texts), CHUNK):
        reply = stub.Translate(pb.TranslateRequest(texts=list(texts[i:i + CHUNK]), source_lang=src, target_lang=tgt,
                                                   model=model), timeout=300)
        out += [t.hypotheses[0].text for t in reply.translations]
    return out


def score(name: str, hyps: Sequence[str], refs: Sequence[str]) -> float:
    """The set's metric: corpus BLEU for John, chrF for the rest."""
    metric = sacrebleu.corpus_bleu if METRIC[name] == "BLEU" else sacrebleu.corpus_chrf
    return metric(list(hyps), [list(refs)]).score


def scores(stub, sets: dict[str, Sets], log: Callable[[str], None] = lambda _: None) -> dict[str, dict[str, float]]:
    """Every set's score per direction, from a Translator stub."""
    out: dict[str, dict[str, float]] = {}
    for name, by_direction in sets.items():
        for direction, (sources, refs) in sorted(by_direction.items()):
            out.setdefault(name, {})[direction] = round(score(name, translate(stub, sources, direction), refs), 2)
            log(f"{name} {direction}: {METRIC[name]} {out[name][direction]:.2f}")
    return out


def serve_and_score(package: Path, graphs: str, threads: int, sets: dict[str, Sets],
                    log: Callable[[str], None]) -> dict[str, dict[str, float]]:
    """The gate's scores of ``package`` served by nmt-serve with ``--int8-graphs graphs``."""
    import grpc

    from nmt.v1 import translator_pb2_grpc as pb_grpc
    from server.child import ServerProcess

    with ServerProcess(package, threads, extra=["--int8", "--int8-graphs", graphs]) as srv, \
            grpc.insecure_channel(srv.address) as channel:
        return scores(pb_grpc.TranslatorStub(channel), sets, log)


def lowest(results: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per set and direction, the lower score of the widths run: what the test records as shipped."""
    by_set: dict[str, dict[str, float]] = {}
    for by_width in results.values():
        for name, by_dir in by_width.items():
            for direction, value in by_dir.items():
                kept = by_set.setdefault(name, {})
                kept[direction] = min(value, kept.get(direction, value))
    return by_set


def card_table(lowest_scores: dict[str, dict[str, float]], directions: Sequence[str]) -> str:
    """The card's "Quality gate" table for these scores (``lowest``'s), its columns in the order of
    ``directions`` (the model's: en->de, de->en, ...), ready to paste."""
    lines = ["| | " + " | ".join(d.replace("-", "->") for d in directions) + " |", "|---|" + "---:|" * len(directions)]
    for name, label in CARD_ROWS.items():
        lines.append(f"| {label} | " + " | ".join(f"{lowest_scores[name][d]:.2f}" for d in directions) + " |")
    return "\n".join(lines)


def shipped_scores(card: Path = CARD) -> dict[str, dict[str, float]]:
    """Per set and direction, the shipped score the card's "Quality gate" table records (the first
    table after CARD_SECTION); ValueError, naming the card, when the section or a row is missing."""
    _, found, rest = card.read_text(encoding="utf-8").partition(CARD_SECTION)
    rows: list[list[str]] = []
    for line in rest.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break  # the end of the first table
    if not found or len(rows) < 3:
        raise ValueError(f"{card}: no table under {CARD_SECTION!r}")
    directions = [cell.replace("->", "-") for cell in rows[0][1:]]
    by_label = {row[0]: row[1:] for row in rows[2:]}
    if missing := [label for label in CARD_ROWS.values() if label not in by_label]:
        raise ValueError(f"{card}: the {CARD_SECTION!r} table has no row {', '.join(missing)}")
    return {name: dict(zip(directions, map(float, by_label[label]), strict=True)) for name, label in CARD_ROWS.items()}


def floors(shipped: dict[str, float]) -> dict[str, float]:
    """The test's floor per direction: FLOOR_MARGIN under the shipped score, rounded down to a tenth
    (the inner round absorbs float noise: 48.10 - 2 is 46.1, not 46.0)."""
    return {d: math.floor(round((value - FLOOR_MARGIN) * 10, 6)) / 10 for d, value in shipped.items()}


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: one row per set and graphs, one column per direction."""
    directions = sorted({d for by_set in results.values() for by_dir in by_set.values() for d in by_dir})
    lines = ["| set | graphs | " + " | ".join(directions) + " |", "|---|---|" + "---:|" * len(directions)]
    for name in SETS:
        for graphs, by_set in results.items():
            if name in by_set:
                cells = [f"{by_set[name][d]:.2f}" if d in by_set[name] else "" for d in directions]
                lines.append(f"| {name} ({METRIC[name]}) | {graphs} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from engine.cpu import exact_int8
    from engine.defaults import INT8_GRAPHS

    p = argparse.ArgumentParser(prog="python -m bench.gate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="the checkpoint directory (default: %(default)s)")
    p.add_argument("--package", type=Path, help="an exported package with int8 graphs (default: export --model)")
    p.add_argument("--int8-graphs", default="", help="int8, int8w8, or both comma-separated (default: both where "
                                                     "this CPU runs int8w8 exactly, else int8)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="write the scores here")
    args = p.parse_args(argv)
    widths = [w for w in args.int8_graphs.split(",") if w] or (["int8w8", "int8"] if exact_int8() else ["int8"])
    if bad := [w for w in widths if w not in INT8_GRAPHS[1:]]:  # a width, not auto
        p.error(f"--int8-graphs {','.join(bad)}: choose int8 or int8w8")
    sets = gate_sets(args.model)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        package = args.package
        if package is None:
            from export.onnx_export import export_checkpoint

            package = Path(tmp) / "default"
            log(f"exporting {args.model} with int8 graphs")
            export_checkpoint(args.model / "model.pt", package, int8=True, log=lambda _: None)
        results = {}
        for graphs in widths:
            log(f"serving {package} with --int8-graphs {graphs}")
            results[graphs] = serve_and_score(package, graphs, args.threads, sets, log)
    print(table(results))
    print(f"\nthe lower width, as {CARD.relative_to(ROOT)} records it under {CARD_SECTION!r}:\n")
    print(card_table(lowest(results), list(sets["john"])))  # John's: the model's directions, in its order
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
