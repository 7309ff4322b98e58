"""``nmt-evaluate``: sacreBLEU BLEU and chrF of a checkpoint, per direction.

    nmt-evaluate runs/small-ende --split test --beam 4

The checkpoint may be a file or a run directory (its averaged model if there is one,
else its last checkpoint). Hypotheses and scores are written next to it as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cli import (
    EXIT_OK,
    EXIT_USAGE,
    ArgumentParser,
    UsageError,
    check_output_file,
    deprecated_alias,
    exit_status_help,
    fail,
)
from training import checkpoint as ckpt_io
from training.config import replace
from training.data import SPLITS, eval_sets, label_direction
from training.decode import translate


@dataclass(frozen=True)
class Score:
    direction: str
    split: str
    sentences: int
    bleu: float
    chrf: float
    signature: str
    beam_size: int
    seconds: float


def score(hyps: list[str], refs: list[str]) -> tuple[float, float, str]:
    import sacrebleu

    bleu = sacrebleu.metrics.BLEU()
    b = bleu.corpus_score(hyps, [refs])
    c = sacrebleu.metrics.CHRF().corpus_score(hyps, [refs])
    return round(b.score, 2), round(c.score, 2), str(bleu.get_signature())


def evaluate(checkpoint: str | Path, split: str = "test", beam_size: int = 4, directions: list[str] | None = None,
             limit: int = 0, batch_size: int = 64, device: str = "cpu", out: Path | None = None) -> list[Score]:
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    path = ckpt_io.resolve(checkpoint)
    model, cfg, ckpt = ckpt_io.load_model(path, device)
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    untrained = [d for d in directions or () if d not in cfg.data.directions]
    if untrained:
        raise ValueError(f"{path} was not trained for {', '.join(untrained)}; it translates "
                         f"{', '.join(cfg.data.directions)}")
    data_cfg = cfg.data if not directions else replace(cfg.data, directions=tuple(directions))
    by_direction: dict[str, tuple[list[str], list[str]]] = {}
    for label, pairs in eval_sets(data_cfg, split).items():  # "en-de", or "en-de/libreoffice-help"
        take = pairs[:limit] if limit else pairs
        by_direction[label] = ([p.src for p in take], [p.tgt for p in take])
    if not by_direction:
        raise ValueError(f"the {split} split of {path} has no sentences for {', '.join(data_cfg.directions)}")
    scores, outputs = [], {}
    for direction, (sources, refs) in by_direction.items():
        start = time.monotonic()
        hyps = translate(model, tokenizer, sources, label_direction(direction)[1], beam_size=beam_size,
                         batch_size=batch_size, device=device)
        bleu, chrf, signature = score(hyps, refs)
        s = Score(direction, split, len(sources), bleu, chrf, signature, beam_size, round(time.monotonic() - start, 1))
        scores.append(s)
        outputs[direction] = [{"source": a, "reference": r, "hypothesis": h} for a, r, h in zip(sources, refs, hyps)]
        print(f"{direction}  {split}  BLEU {bleu:6.2f}  chrF {chrf:6.2f}  ({len(sources)} sentences, "
              f"beam {beam_size}, {s.seconds:.0f}s)", flush=True)
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    out = out or run_dir / f"eval_{path.stem}_{split}_beam{beam_size}.json"
    out.write_text(json.dumps({"checkpoint": path.name, "step": ckpt.get("step"),
                               "scores": [asdict(s) for s in scores], "outputs": outputs},
                              ensure_ascii=False, indent=1))
    return scores


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="nmt-evaluate", description=__doc__, epilog=exit_status_help(EXIT_USAGE))
    p.add_argument("checkpoint", help="a checkpoint file or a run directory")
    p.add_argument("--split", default="test", choices=SPLITS, help="which split of the checkpoint's data")
    p.add_argument("--beam", type=int, default=4, help="beam size; 1 = greedy")
    p.add_argument("--directions", help="comma-separated subset, e.g. de-en (default: all of the checkpoint's)")
    p.add_argument("--limit", type=int, default=0, help="first N sentences per direction (0 = all)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences decoded together")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to decode")
    p.add_argument("--threads", type=int, default=0, help="CPU intra-op threads; 0 = torch's default")
    p.add_argument("--json", dest="out", type=Path, help="JSON file for scores and hypotheses (default: "
                   "eval_CHECKPOINT_SPLIT_beamN.json in the run directory)")
    deprecated_alias(p, "--out", "--json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        if args.beam < 1 or args.batch_size < 1 or args.limit < 0 or args.threads < 0:
            raise UsageError("--beam and --batch-size must be at least 1, --limit and --threads not negative")
        if args.out:
            check_output_file(args.out, "--json")
        evaluate(args.checkpoint, args.split, args.beam, args.directions.split(",") if args.directions else None,
                 args.limit, args.batch_size, device, args.out)
    except (FileNotFoundError, ValueError) as e:  # a checkpoint or direction that is not there (UsageError too)
        return fail("nmt-evaluate", str(e), EXIT_USAGE)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
