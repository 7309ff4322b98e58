"""``python -m bench.studies.capacity``: model shapes and vocabulary sizes trained for the same
time on the same mixture, then scored on the dev splits and timed as a server runs them (int8,
greedy, one thread): quality against serving cost, to choose a shape by measurement.

    python -m bench.studies.capacity --out runs/capacity --minutes 30 --device cuda \\
        --sources '{"bible": 0.3, "libreoffice-help": 0.5, "debian-catalogs": 1.0, "debian-examples": 3.0}' \\
        today: vocab16k:data.vocab_size=16000 vocab32k:data.vocab_size=32000 \\
        dec4:model.n_decoder_layers=4 wide:model.d_model=512,model.n_heads=8,model.d_ff=2048

Each ``NAME:SECTION.KEY=VALUE,...`` is one variant of ``--preset`` (``NAME:`` is the preset as it
is). Every variant trains from random weights (its own tokenizer of ``data.vocab_size`` pieces,
trained on the mixture) with the same seed, batch, schedule and ``--minutes``, so the comparison
is what the shape makes of the same compute; a warm start would favour the shape it came from.

Each variant is a run directory ``OUT/NAME`` that ``nmt-train`` resumes, so the study continues
across calls (``--chunk-minutes`` bounds one call, as on a leased GPU or in CPU chunks): a call
that leaves a run unfinished exits with status 75 and the same command goes on. A finished run
is shipped (``OUT/NAME/model``, its last checkpoints averaged), exported int8
(``OUT/NAME/package``) and scored once (``OUT/NAME/scores.json``, ``bench.modern_eval``'s sets,
dev part: the choice is made without looking at test scores). Then every package is timed in
``--rounds`` rounds, the variants in alternating order so a load that comes and goes hits all
alike; the fastest round of each counts.

Prints a table (parameters, vocabulary, dev chrF per split averaged over directions, their mean,
sentences/s) and writes ``OUT/capacity.json`` and ``OUT/capacity.png`` (mean dev chrF against
sentences/s; the variants no other beats on both are joined: the curve to choose from).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.compare_evals import split_means
from bench.modern_eval import DIRECTIONS, SPLITS, evaluate, load_sets, package_systems
from cli import EXIT_OK, EXIT_UNFINISHED, EXIT_USAGE, UsageError, fail, parse_direction

PROG = "python -m bench.studies.capacity"
NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
SETTING = re.compile(r"[a-z_]+\.[a-z_]+=[^,]+")
DEV_SPLITS = ("everyday", "examples", "modern", "bible", "descriptions", "catalogs", "debconf", "manuals", "manpages")


@dataclass(frozen=True)
class Variant:
    name: str
    settings: tuple[str, ...]  # nmt-train --set SECTION.KEY=VALUE, over the preset


def parse_variant(text: str) -> Variant:
    """``NAME:SECTION.KEY=VALUE,...`` (``NAME:`` alone: the preset unchanged)."""
    name, sep, rest = text.partition(":")
    if not sep or not NAME.fullmatch(name):
        raise UsageError(f"variant {text!r}: write NAME:SECTION.KEY=VALUE,... (NAME: lowercase letters, digits, "
                         "'-'; NAME: alone is the preset as it is)")
    settings = tuple(s for s in rest.split(",") if s)
    bad = [s for s in settings if not SETTING.fullmatch(s)]
    if bad:
        raise UsageError(f"variant {name}: {bad[0]!r} is not SECTION.KEY=VALUE")
    return Variant(name, settings)


def train_command(variant: Variant, run: Path, args: argparse.Namespace) -> list[str]:
    """The nmt-train call of one variant: the same for every variant but its settings."""
    cmd = [sys.executable, "-m", "training.train", "--out", str(run), "--preset", args.preset,
           "--directions", ",".join(args.directions), "--batch-tokens", str(args.batch_tokens),
           "--warmup", str(args.warmup), "--device", args.device, "--max-minutes", f"{args.minutes:g}",
           "--chunk-minutes", f"{args.chunk_minutes:g}",
           "--set", "data.corpus=mixed", "--set", f"data.sources={args.sources}",
           "--set", f"train.save_every={args.save_every}", "--set", f"train.keep_checkpoints={args.average}",
           "--set", f"train.average_last={args.average}"]
    if args.max_steps:
        cmd += ["--max-steps", str(args.max_steps)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    for setting in [*args.set, *variant.settings]:  # a variant's own settings last: they win
        cmd += ["--set", setting]
    return cmd


def run_step(cmd: list[str], what: str) -> int:
    print(f"+ {' '.join(cmd)}", file=sys.stderr, flush=True)
    code = subprocess.call(cmd)
    if code not in (EXIT_OK, EXIT_UNFINISHED):
        raise RuntimeError(f"{what} failed with exit status {code}")
    return code


def build(variant: Variant, args: argparse.Namespace) -> Path | None:
    """Train (or continue), ship and export one variant: its package, or None while its run is
    unfinished."""
    run = args.out / variant.name
    package = run / "package"
    if (package / "model.json").is_file():
        return package
    if run_step(train_command(variant, run, args), f"training {variant.name}") == EXIT_UNFINISHED:
        return None
    run_step([sys.executable, "-m", "training.ship", str(run), str(run / "model")], f"shipping {variant.name}")
    run_step([sys.executable, "-m", "export.onnx_export", str(run / "model"), str(package), "--int8", "--force"],
             f"exporting {variant.name}")
    return package


def parameters(model_dir: Path) -> int:
    """Trainable parameters of a shipped model (shared embeddings counted once)."""
    from training import checkpoint as ckpt_io
    from training.config import RunConfig
    from training.model import Transformer

    cfg = RunConfig.from_dict(ckpt_io.load(ckpt_io.resolve(model_dir))["config"])
    return sum(p.numel() for p in Transformer(cfg.model).parameters())


def scores(variant: Variant, package: Path, args: argparse.Namespace) -> dict:
    """The variant's dev scores, computed once and kept in OUT/NAME/scores.json."""
    path = args.out / variant.name / "scores.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    sets = load_sets(args.splits, args.directions, args.limit, "dev")
    (system,) = package_systems(package, ["int8"], beam=1, threads=1)
    report = evaluate(sets, [system], log=lambda line: print(f"{variant.name}: {line}", file=sys.stderr, flush=True))
    config = json.loads((package.parent / "model" / "config.json").read_text(encoding="utf-8"))
    out = {"variant": variant.name, "settings": list(variant.settings),
           "parameters": parameters(package.parent / "model"), "vocab_size": config["model"]["vocab_size"],
           "sets": [{"split": r["split"], "direction": r["direction"], "lines": r["lines"],
                     **{k: r["scores"][system.name][k] for k in ("bleu", "chrf", "unk")}} for r in report["sets"]]}
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out


def speed_texts(splits: Sequence[str], directions: Sequence[str], lines: int) -> dict[str, list[str]]:
    """{direction: the first ``lines`` dev sources of each split}: the same texts for every variant."""
    out: dict[str, list[str]] = {d: [] for d in directions}
    for (_, direction), pairs in load_sets(splits, directions, lines, "dev").items():
        out[direction] += [p.src for p in pairs]
    return out


def speeds(packages: dict[str, Path], texts: dict[str, list[str]], batch: int, rounds: int) -> dict[str, float]:
    """{variant: sentences/s} of int8 greedy decoding on one thread, batches of ``batch`` texts;
    each round decodes every variant in turn (the order reversed every other round) and the
    fastest round of each counts."""
    from engine.package import ModelPackage
    from export.verify import cpu_runtime
    from training.tokenizer import Tokenizer

    loaded = {}
    for name, path in packages.items():
        package = ModelPackage.load(path)
        loaded[name] = (cpu_runtime(package, "int8", 1), Tokenizer(package.tokenizer_path))
    n = sum(len(t) for t in texts.values())
    work = by_target(texts)
    best = {name: float("inf") for name in packages}
    order = list(packages)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            rt, tokenizer = loaded[name]
            start = time.perf_counter()
            decode_texts(rt, tokenizer, work, batch)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: round(n / seconds, 2) for name, seconds in best.items()}


def by_target(texts: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    """{direction: sources} (as :func:`speed_texts` gives) as (target language, sources) pairs."""
    return [(parse_direction(direction)[1], sources) for direction, sources in texts.items()]


def decode_texts(runtime, tokenizer, work: Sequence[tuple[str, list[str]]], batch: int) -> int:
    """Translate each (target language, sources) of ``work`` in batches of ``batch``, greedy;
    returns how many sentences came back."""
    from export.verify import translate_onnx

    n = 0
    for target, sources in work:
        for i in range(0, len(sources), batch):
            n += len(translate_onnx(runtime, tokenizer, sources[i:i + batch], target, batch_size=batch))
    return n


def frontier(rows: Sequence[dict]) -> list[str]:
    """The variants no other beats on both mean dev chrF and sentences/s, fastest first."""
    keep = [r for r in rows if not any(o["chrf"] >= r["chrf"] and o["sentences_per_s"] >= r["sentences_per_s"]
                                       and (o["chrf"], o["sentences_per_s"]) != (r["chrf"], r["sentences_per_s"])
                                       for o in rows)]
    return [r["variant"] for r in sorted(keep, key=lambda r: -r["sentences_per_s"])]


def table(rows: Sequence[dict], splits: Sequence[str]) -> str:
    head = ["variant", "parameters", "vocabulary", *splits, "mean chrF", "sentences/s"]
    lines = [head, ["---"] * len(head)]
    for r in rows:
        lines.append([r["variant"], f"{r['parameters']:,}", f"{r['vocab_size']:,}",
                      *(f"{r['splits'].get(s, float('nan')):.2f}" for s in splits), f"{r['chrf']:.2f}",
                      f"{r['sentences_per_s']:.2f}"])
    return "\n".join("| " + " | ".join(row) + " |" for row in lines)


def plot(rows: Sequence[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.scatter([r["sentences_per_s"] for r in rows], [r["chrf"] for r in rows])
    for r in rows:
        ax.annotate(r["variant"], (r["sentences_per_s"], r["chrf"]), textcoords="offset points", xytext=(4, 4))
    best = {r["variant"]: r for r in rows}
    line = [best[name] for name in frontier(rows)]
    ax.plot([r["sentences_per_s"] for r in line], [r["chrf"] for r in line], linestyle="--")
    ax.set_xlabel("sentences/s (int8, greedy, one thread)")
    ax.set_ylabel("mean dev chrF")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", metavar="NAME:SECTION.KEY=VALUE,...")
    p.add_argument("--out", type=Path, required=True, help="the study's directory: one run per variant, the results")
    p.add_argument("--sources", required=True, help="the mixture (data.sources JSON), the same for every variant")
    p.add_argument("--preset", default="deep-shallow", help="the shape the variants change")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="an nmt-train setting of every variant (repeatable), e.g. train.lr_scale=0.5")
    p.add_argument("--minutes", type=float, required=True, help="training minutes of every variant")
    p.add_argument("--chunk-minutes", type=float, default=0.0, help="stop one call after this many minutes of a "
                   "run, saved (exit status 75: run the same command again); 0: no bound")
    p.add_argument("--max-steps", type=int, default=0, help="also stop each run after this many steps (0: no bound)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    p.add_argument("--threads", type=int, default=0, help="training's CPU threads (0: nmt-train's default)")
    p.add_argument("--batch-tokens", type=int, default=6000)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--save-every", type=int, default=200, help="checkpoint every N steps")
    p.add_argument("--average", type=int, default=4, help="the shipped weights average the last N checkpoints")
    p.add_argument("--directions", default=",".join(DIRECTIONS))
    p.add_argument("--splits", default=",".join(DEV_SPLITS), help="dev splits scored, comma-separated")
    p.add_argument("--limit", type=int, default=300, help="first N dev lines per split and direction")
    p.add_argument("--speed-lines", type=int, default=16, help="dev sources per split and direction timed")
    p.add_argument("--speed-batch", type=int, default=1, help="texts per timed batch (1: one request at a time)")
    p.add_argument("--rounds", type=int, default=3)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        variants = [parse_variant(v) for v in args.variants]
        if len({v.name for v in variants}) != len(variants):
            raise UsageError("two variants have the same name")
        args.directions = [d for d in args.directions.split(",") if d]
        args.splits = [s for s in args.splits.split(",") if s]
        unknown = [d for d in args.directions if d not in DIRECTIONS] + [s for s in args.splits if s not in SPLITS]
        if unknown:
            raise UsageError(f"unknown direction or split {unknown[0]!r}")
        if args.minutes <= 0 and not args.max_steps:
            raise UsageError("give --minutes (the same training time for every variant)")
        json.loads(args.sources)
    except json.JSONDecodeError as e:
        return fail(PROG, f"--sources is not JSON: {e}", EXIT_USAGE)
    except UsageError as e:
        return fail(PROG, str(e), EXIT_USAGE)
    args.out.mkdir(parents=True, exist_ok=True)
    packages: dict[str, Path] = {}
    for variant in variants:
        package = build(variant, args)
        if package is None:
            print(f"{variant.name} is saved and not finished: run the same command again to continue", flush=True)
            return EXIT_UNFINISHED
        packages[variant.name] = package
    results = {v.name: scores(v, packages[v.name], args) for v in variants}
    rates = speeds(packages, speed_texts(args.splits, args.directions, args.speed_lines), args.speed_batch,
                   args.rounds)
    rows = []
    for name, r in results.items():
        # chrF per split, the mean over its directions
        means = {k: round(v, 2) for k, v in split_means((s["split"], s["chrf"]) for s in r["sets"]).items()}
        rows.append({**r, "splits": means, "chrf": round(sum(means.values()) / len(means), 2),
                     "sentences_per_s": rates[name]})
    report = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "rows": rows, "frontier": frontier(rows)}
    (args.out / "capacity.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    title = f"{args.minutes:g} minutes each on {args.device}"
    plot(rows, args.out / "capacity.png", title)
    print(table(rows, args.splits))
    print(f"\nbest for their cost: {', '.join(report['frontier'])}; {args.out / 'capacity.png'}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
