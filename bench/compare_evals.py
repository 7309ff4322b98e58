"""Two ``bench.modern_eval --json`` reports side by side: per domain (split) the mean over its
directions of the new model's score minus the old one's, and whether the new model is above the
old on every domain, the rule a new default is shipped by (docs/training.md).

Dev sets are small (the GIMP manual holds 36 lines a direction), so each difference comes with a
paired bootstrap (Koehn, 2004): the lines of every direction are resampled with replacement, the
same lines for both models, the corpus score recomputed from sacrebleu's per-line statistics, and
the domain's mean difference taken ``--samples`` times. The table gives the 95% interval of that
difference and the share of samples in which the new model is not above the old (a one-sided p
for a gain); a domain where the new model is at or above the old in under 5% of the samples is a
loss the lines cannot explain by chance.

    python -m bench.compare_evals runs/eval-default.json runs/eval-stage13.json

The Bible is compared by BLEU (as the model card quotes it), every other split by chrF;
``--metric chrf`` or ``--metric bleu`` uses one for all. Both reports must come from the same
``--part``, ``--limit`` and ``--beam`` on the same lines, or the difference means nothing: a
mismatch is an error. Exit status 0 either way; ``--require-gain`` makes it 1 when the new model
is not above the old on every domain (for scripts).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from cli import ArgumentParser

BLEU_SPLITS = frozenset({"bible"})  # quoted by BLEU in the model card; the rest by chrF
SAME_SETTINGS = ("part", "limit", "beam")
SAMPLES = 1000  # bootstrap resamples per domain
SEED = 12345  # the resampling is seeded: the same two reports always give the same table
SIGNIFICANT = 0.05  # a domain with P(new >= old) under this is a significant loss


class ReportMismatch(ValueError):
    """The two reports were not made on the same lines."""


@dataclass(frozen=True)
class DomainDelta:
    split: str
    metric: str
    old: float  # mean over the directions both reports hold
    new: float
    directions: int
    worst: tuple[str, float]  # the direction that lost most (or gained least), and by how much
    low: float  # the 95% bootstrap interval of new - old
    high: float
    p_not_above: float  # share of bootstrap samples in which new - old <= 0
    p_not_below: float  # share of bootstrap samples in which new - old >= 0

    @property
    def delta(self) -> float:
        return self.new - self.old

    @property
    def significant_loss(self) -> bool:
        """Below the old model by more than the lines explain by chance (two identical models never are)."""
        return self.p_not_below < SIGNIFICANT

    @property
    def significant_gain(self) -> bool:
        return self.p_not_above < SIGNIFICANT


def passes(deltas: list[DomainDelta], rule: Literal["strict", "significant"]) -> bool:
    """``strict``: above the old model on every domain. ``significant``: below it on none by more than
    chance explains, and above it on at least one by more than chance explains."""
    if rule == "strict":
        return all(d.delta > 0 for d in deltas)
    return not any(d.significant_loss for d in deltas) and any(d.significant_gain for d in deltas)


def load_report(path: Path) -> dict:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ReportMismatch(f"{path}: cannot read a modern_eval report ({e})") from None
    if not isinstance(report, dict) or "sets" not in report or "systems" not in report:
        raise ReportMismatch(f"{path}: not a bench.modern_eval --json report (no 'sets' and 'systems')")
    return report


def pick_system(report: dict, path: Path, wanted: str | None) -> str:
    systems = [s for s in report["systems"] if s.startswith("ours")]
    if wanted is not None:
        if wanted not in report["systems"]:
            raise ReportMismatch(f"{path}: no system {wanted!r} (it holds {', '.join(report['systems'])})")
        return wanted
    if len(systems) != 1:
        raise ReportMismatch(f"{path}: holds {', '.join(report['systems'])}; pick one with --system")
    return systems[0]


def metric_of(split: str, metric: str | None) -> str:
    if metric is not None:
        return metric
    return "bleu" if split in BLEU_SPLITS else "chrf"


def split_means(values: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Per split, the mean of its directions' scores, in the order the splits first appear."""
    by: dict[str, list[float]] = {}
    for split, value in values:
        by.setdefault(split, []).append(value)
    return {split: sum(v) / len(v) for split, v in by.items()}


# sacrebleu's per-line statistics and scoring from their sum: the two methods its own paired
# bootstrap (``sacrebleu --paired-bs``, sacrebleu/significance.py) is built on, in every 2.x release.
_SCORERS = {"bleu": BLEU(), "chrf": CHRF()}


def _line_stats(metric: str, hypotheses: list[str], references: list[str]) -> np.ndarray:
    """sacrebleu's sufficient statistics of each line (n-gram matches and counts), one row a line:
    summing rows and scoring the sum is the corpus score, which is what makes resampling cheap."""
    scorer = _SCORERS[metric]
    return np.asarray(scorer._extract_corpus_statistics(hypotheses, [references]), dtype=np.float64)


def _corpus_score(metric: str, stats: np.ndarray) -> float:
    return _SCORERS[metric]._compute_score_from_stats(stats.sum(axis=0).tolist()).score


def bootstrap(pairs: list[tuple[str, np.ndarray, np.ndarray]], samples: int,
              rng: np.random.Generator) -> np.ndarray:
    """``samples`` resampled values of the mean over directions of new - old; ``pairs`` holds per
    direction (metric, old line statistics, new line statistics) on the same lines."""
    out = np.empty(samples)
    for b in range(samples):
        total = 0.0
        for metric, old, new in pairs:
            idx = rng.integers(0, len(old), len(old))
            total += _corpus_score(metric, new[idx]) - _corpus_score(metric, old[idx])
        out[b] = total / len(pairs)
    return out


def compare(old: dict, new: dict, old_system: str, new_system: str,
            metric: str | None = None, samples: int = SAMPLES) -> list[DomainDelta]:
    """Per split, in the old report's order, over the directions both hold."""
    for key in SAME_SETTINGS:
        a, b = old.get("settings", {}).get(key), new.get("settings", {}).get(key)
        if a != b:
            raise ReportMismatch(f"the reports differ in --{key} ({a} against {b}): run both the same way")
    new_sets = {(s["split"], s["direction"]): s for s in new["sets"]}
    rows = []  # (split, direction, old score, new score) over the sets both reports hold
    for s in old["sets"]:
        other = new_sets.get((s["split"], s["direction"]))
        if other is None:
            continue
        if s["lines"] != other["lines"]:
            raise ReportMismatch(f"{s['split']} {s['direction']}: {s['lines']} lines against {other['lines']}")
        m = metric_of(s["split"], metric)
        if [o["source"] for o in s["outputs"]] != [o["source"] for o in other["outputs"]]:
            raise ReportMismatch(f"{s['split']} {s['direction']}: the reports hold different lines")
        refs = [o["reference"] for o in s["outputs"]]
        stats = (m, _line_stats(m, [o[old_system] for o in s["outputs"]], refs),
                 _line_stats(m, [o[new_system] for o in other["outputs"]], refs))
        rows.append((s["split"], s["direction"], s["scores"][old_system][m], other["scores"][new_system][m], stats))
    if not rows:
        raise ReportMismatch("the reports share no split and direction")
    olds, news = split_means((r[0], r[2]) for r in rows), split_means((r[0], r[3]) for r in rows)
    rng = np.random.default_rng(SEED)
    out = []
    for split in olds:
        mine = [r for r in rows if r[0] == split]
        worst = min(mine, key=lambda r: r[3] - r[2])
        deltas = bootstrap([r[4] for r in mine], samples, rng)
        low, high = np.percentile(deltas, [2.5, 97.5])
        out.append(DomainDelta(split, metric_of(split, metric), olds[split], news[split], len(mine),
                               (worst[1], round(worst[3] - worst[2], 2)), float(low), float(high),
                               float(np.mean(deltas <= 0)), float(np.mean(deltas >= 0))))
    return out


def render(deltas: list[DomainDelta]) -> str:
    lines = ["| domain | metric | directions | old | new | new - old | 95% interval | P(new <= old) "
             "| worst direction |", "|---|---|---:|---:|---:|---:|---|---:|---|"]
    for d in deltas:
        lines.append(f"| {d.split} | {d.metric} | {d.directions} | {d.old:.2f} | {d.new:.2f} | {d.delta:+.2f} | "
                     f"{d.low:+.2f} .. {d.high:+.2f} | {d.p_not_above:.3f} | {d.worst[0]} {d.worst[1]:+.2f} |")
    below = [d.split for d in deltas if d.delta <= 0]
    significant = [d.split for d in deltas if d.significant_loss]
    gains = [d.split for d in deltas if d.significant_gain]
    lines.append("")
    lines.append("above the old model on every domain" if not below
                 else f"not above the old model on: {', '.join(below)}")
    lines.append(f"significantly below (P(new >= old) < {SIGNIFICANT}) on: {', '.join(significant) or 'none'}")
    lines.append(f"significantly above (P(new <= old) < {SIGNIFICANT}) on: {', '.join(gains) or 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old", type=Path, help="the report of the model to beat (e.g. the default)")
    p.add_argument("new", type=Path, help="the report of the candidate")
    p.add_argument("--metric", choices=("chrf", "bleu"), help="one metric for every split "
                                                              "(default: BLEU for the Bible, chrF for the rest)")
    p.add_argument("--system", help="which system of each report (default: its only 'ours-*' one)")
    p.add_argument("--samples", type=int, default=SAMPLES, help=f"bootstrap resamples per domain (default {SAMPLES})")
    p.add_argument("--require-gain", action="store_true",
                   help="exit 1 unless the new model is above the old on every domain")
    p.add_argument("--require-significant", action="store_true",
                   help="exit 1 unless the new model is significantly below the old on no domain and "
                        "significantly above it on at least one")
    args = p.parse_args(argv)
    if args.samples < 1:
        print(f"error: --samples must be at least 1, not {args.samples}", file=sys.stderr)
        return 2
    try:
        old, new = load_report(args.old), load_report(args.new)
        deltas = compare(old, new, pick_system(old, args.old, args.system), pick_system(new, args.new, args.system),
                         args.metric, args.samples)
    except ReportMismatch as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(deltas))
    if args.require_gain and not passes(deltas, "strict"):
        return 1
    if args.require_significant and not passes(deltas, "significant"):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
