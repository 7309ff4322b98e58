"""Pivoting: a pair no loaded model translates directly, in two legs through a language both
legs serve (de -> en -> fr), and the cross-attention of the two legs composed into one.

The routes are planned from the loaded models' pairs alone (``routes``, ``route``); the
servicer runs the legs (server/service.py). The composed attention lets everything that
places markup by alignment (the gateway's HTML path, documents) work through a pivot: the
first leg's attention says which source pieces each pivot piece came from, the second's which
pivot pieces each target piece came from, and the two are chained over the pivot text. The
second leg re-tokenizes the pivot text (its model may have another tokenizer), so its source
pieces are matched to the first leg's target pieces by where they fall in the text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

PIVOTS = ("en",)  # languages a pair may go through, in order of preference


@dataclass(frozen=True)
class Route:
    """How a pair is translated: directly by ``second`` (``via`` empty), or ``first`` into
    ``via`` and ``second`` from it."""

    pair: str
    second: str
    via: str = ""
    first: str = ""


def route(pairs: Mapping[str, Sequence[str]], source: str, target: str, named: str = "",
          default: str = "") -> Route | None:
    """The route of ``source -> target`` over ``pairs`` (model name -> its pairs, in load
    order). A named model: directly, else through a pivot with both legs on that model. No
    name: the default model, else the first model that serves the pair, else the first pivot
    (legs on the default model preferred); None when there is none."""
    pair = f"{source}-{target}"
    if named:
        candidates = {named: pairs.get(named, ())}
    else:
        order = [default, *(name for name in pairs if name != default)] if default in pairs else list(pairs)
        candidates = {name: pairs[name] for name in order}
    for name, served in candidates.items():
        if pair in served:
            return Route(pair, name)
    for via in PIVOTS:
        if via in (source, target):
            continue
        first = next((name for name, served in candidates.items() if f"{source}-{via}" in served), None)
        second = next((name for name, served in candidates.items() if f"{via}-{target}" in served), None)
        if first is not None and second is not None:
            return Route(pair, second, via, first)
    return None


def routes(pairs: Mapping[str, Sequence[str]], default: str = "") -> list[Route]:
    """Every pair no model serves directly that a request naming no model is translated
    through a pivot, in a stable order."""
    direct = {pair for served in pairs.values() for pair in served}
    languages = sorted({code for pair in direct for code in pair.split("-", 1)})
    out = []
    for source in languages:
        for target in languages:
            if source != target and f"{source}-{target}" not in direct:
                r = route(pairs, source, target, default=default)
                if r is not None:
                    out.append(r)
    return out


def piece_spans(pieces: Sequence[str]) -> list[tuple[float, float]]:
    """Where each SentencePiece piece falls in its text, as fractions of the text's length:
    the word marker counts as the space it stands for, a byte piece (``<0xE2>``) as one
    character, a control piece (a language tag, ``</s>``) as nothing."""
    lengths = []
    for p in pieces:
        if p.startswith("<0x") and p.endswith(">") and len(p) == 6:
            lengths.append(1)
        elif (p.startswith("<") and p.endswith(">")) or (p.startswith(">>") and p.endswith("<<")):
            lengths.append(0)
        else:
            lengths.append(len(p))
    total = sum(lengths) or 1
    spans, at = [], 0
    for n in lengths:
        spans.append((at / total, (at + n) / total))
        at += n
    return spans


def compose_attention(first: np.ndarray, first_target: Sequence[str], second: np.ndarray,
                      second_source: Sequence[str]) -> np.ndarray:
    """Target x source attention through the pivot: ``second`` (target x pivot pieces as the
    second leg read them) times the overlap of those pieces with the first leg's output pieces
    (``first_target``) times ``first`` (those pieces x source). Each row sums to 1 (or is 0
    where a target piece attended only to pieces of no length)."""
    a, b = piece_spans(second_source), piece_spans(first_target)
    overlap = np.zeros((len(a), len(b)), dtype=np.float64)
    for i, (s0, e0) in enumerate(a):
        if e0 <= s0:
            continue
        for j, (s1, e1) in enumerate(b):
            shared = min(e0, e1) - max(s0, s1)
            if shared > 0:
                overlap[i, j] = shared / (e0 - s0)
    out = second.astype(np.float64) @ overlap @ first.astype(np.float64)
    sums = out.sum(axis=1, keepdims=True)
    return (out / np.where(sums > 0, sums, 1.0)).astype(np.float32)
