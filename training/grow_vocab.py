"""``python -m training.grow_vocab``: a trained model's vocabulary grown by the words its mixture
spells in the most pieces, so the model can be fine-tuned on a larger vocabulary instead of
trained again from random weights.

    python -m training.grow_vocab --from models/default --add 2000 --out runs/grown/tokenizer.model

Why: the default's joint 8k vocabulary was trained on a Bible- and help-heavy corpus, and it
spells everyday words in fragments ("Thank" is ``▁Th an k``, "Hello" ``▁He llo``, "Welcome"
``▁We l com e``); a model that sees ``▁He`` first writes the Bible's "Heil!" for "Hello!".

What: every whitespace word of the training mixture (its sources in their shares, so what the
model trains on most counts most) that the vocabulary spells in two or more pieces is a
candidate; the ``--add`` words that save the most pieces (count x (pieces - 1)) become pieces of
their own, appended after the old ones so every old id keeps its meaning. Each new piece scores
one more than the pieces that spelled it together, so the unigram segmentation picks it for
its word and changes nothing else. ``nmt-train --init-from`` (training/warm_start.py) then gives
each new row the mean of the rows that spelled it.

Writes the SentencePiece model to ``--out`` and a report beside it (``.json``: the settings, the
added pieces, pieces per sentence before and after of a training sample and of each dev set). Prints the same.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from sentencepiece import sentencepiece_model_pb2

from cli import EXIT_OK, ArgumentParser, UsageError, fail
from training import checkpoint as ckpt_io
from training.config import RunConfig
from training.data import eval_sets, load_pairs, protect_text
from training.tokenizer import Tokenizer

PROG = "python -m training.grow_vocab"
DESCRIPTION = ("Grow a trained model's vocabulary by the words its training mixture spells in the most pieces, "
               "so it can be fine-tuned (nmt-train --init-from) on the larger vocabulary.")
WORD_MARK = "\u2581"
NORMAL = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
SCORE_MARGIN = 1.0  # how much a new piece outscores the pieces that spelled its word
TRAIN_SAMPLE = 20_000  # training sentences the report spells both ways
TRAIN_ROW = "train (sample, both sides)"


def words(texts: Iterable[str], max_chars: int) -> Counter[str]:
    """Whitespace words of ``texts`` without the punctuation around them; letters only (numbers,
    paths and identifiers are spelled in pieces on purpose), 2 to ``max_chars`` characters."""
    counts: Counter[str] = Counter()
    for text in texts:
        for token in text.split():
            word = token.strip("\"'“”„‚‘’«»‹›()[]{}¿¡.,;:!?…-–—*/")
            if 2 <= len(word) <= max_chars and word.isalpha():
                counts[word] += 1
    return counts


def choose(tokenizer: Tokenizer, counts: Counter[str], add: int) -> list[tuple[str, int, float]]:
    """The ``add`` words that save the most pieces: (piece, pieces saved, score), best first."""
    sp = tokenizer.sp
    ranked = []
    for word, n in counts.items():
        piece = sp.normalize(word)  # NFKC as the tokenizer sees it, with the word mark in front
        if not piece.startswith(WORD_MARK):
            piece = WORD_MARK + piece
        if sp.piece_to_id(piece) != sp.unk_id():
            continue  # already a piece (the segmentation may still split it; leave it alone)
        ids = sp.encode(word, out_type=int)
        if len(ids) < 2:
            continue
        ranked.append((piece, n * (len(ids) - 1), sum(sp.get_score(i) for i in ids) + SCORE_MARGIN))
    ranked.sort(key=lambda r: (-r[1], r[0]))
    chosen, seen = [], set()
    for piece, saved, score in ranked:
        if piece not in seen:  # two words that normalize alike are one piece
            seen.add(piece)
            chosen.append((piece, saved, score))
        if len(chosen) == add:
            break
    return chosen


def grow(model_proto: bytes, pieces: Sequence[tuple[str, float]]) -> bytes:
    """The SentencePiece model with ``pieces`` (text, score) appended as ordinary pieces."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_proto)
    have = {p.piece for p in proto.pieces}
    for text, score in pieces:
        if text in have:
            raise ValueError(f"{text!r} is already a piece of the vocabulary")
        new = proto.pieces.add()
        new.piece, new.score, new.type = text, score, NORMAL
        have.add(text)
    proto.trainer_spec.vocab_size = len(proto.pieces)
    return proto.SerializeToString()


def pieces_per_sentence(tokenizer: Tokenizer, texts: Sequence[str]) -> float:
    return sum(len(ids) for ids in tokenizer.encode_batch(texts)) / max(len(texts), 1)


def by_source(rows: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """Dev rows (``en-de/debian-catalogs``: [before, after]) as the mean over each source's
    directions; a single corpus's labels are directions, each its own row."""
    groups: dict[str, list[list[float]]] = {}
    for label, row in rows.items():
        groups.setdefault(label.split("/", 1)[-1], []).append(row)
    return {source: (sum(r[0] for r in group) / len(group), sum(r[1] for r in group) / len(group))
            for source, group in groups.items()}


def load_source(path: str) -> tuple[Tokenizer, RunConfig]:
    """The tokenizer and run config of a shipped model, run directory or checkpoint."""
    ckpt = ckpt_io.load(ckpt_io.resolve(path))
    return ckpt_io.load_tokenizer(ckpt), RunConfig.from_dict(ckpt["config"])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ArgumentParser(prog=PROG, description=DESCRIPTION)
    p.add_argument("--from", dest="source", required=True,
                   help="the model whose vocabulary grows: a shipped model's directory, a run or a .pt checkpoint")
    p.add_argument("--add", type=int, required=True, help="how many pieces to add")
    p.add_argument("--out", required=True,
                   help="the new SentencePiece model (a .model file; the report goes beside it)")
    p.add_argument("--sources", default="",
                   help="the mixture the words are counted on (JSON, as nmt-train's data.sources); "
                        "default: the model's own")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.add < 1:
            raise UsageError(f"--add must be at least 1, got {args.add}")
        out = Path(args.out)
        if out.suffix != ".model":
            raise UsageError(f"--out {out}: give a .model file (nmt-train reads tokenizer.model in its run)")
        try:
            tokenizer, cfg = load_source(args.source)
        except (FileNotFoundError, ValueError) as e:
            raise UsageError(f"--from: {e}") from e
        data = cfg.data
        if args.sources:
            try:
                mixture = json.loads(args.sources)
            except json.JSONDecodeError as e:
                raise UsageError(f"--sources is not JSON: {e}") from e
            data = replace(data, corpus="mixed", sources=mixture)
        texts = [protect_text(t, data) for p in load_pairs(data, "train") for t in (p.src, p.tgt)]
        max_chars = _max_piece_chars(tokenizer.model_proto)
        chosen = choose(tokenizer, words(texts, max_chars), args.add)
        grown = Tokenizer(model_proto=grow(tokenizer.model_proto, [(p, s) for p, _, s in chosen]))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(grown.model_proto)
        dev = {label: [p.src for p in pairs] for label, pairs in sorted(eval_sets(data, "dev").items())}
        sample = random.Random(1).sample(texts, min(len(texts), TRAIN_SAMPLE))
        rows = {TRAIN_ROW: [round(pieces_per_sentence(t, sample), 2) for t in (tokenizer, grown)]}
        rows |= {label: [round(pieces_per_sentence(t, sources), 2) for t in (tokenizer, grown)]
                 for label, sources in dev.items() if sources}
        report = {"from": args.source, "added": len(chosen), "vocab_size": [tokenizer.vocab_size, grown.vocab_size],
                  "score_margin": SCORE_MARGIN, "sources": data.sources,
                  "pieces_per_sentence": rows,  # train sample (both sides) and dev sets (source side): [before, after]
                  "pieces": [{"piece": p, "saved": n, "score": round(s, 4)} for p, n, s in chosen]}
        out.with_suffix(".json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    except UsageError as e:
        return fail(PROG, str(e))
    print(f"{out}: {tokenizer.vocab_size} -> {grown.vocab_size} pieces "
          f"(first added: {', '.join(p for p, _, _ in chosen[:12])})")
    print(f"{'set (dev: source side, mean of directions)':42} pieces/sentence")
    for source, (before, after) in by_source(rows).items():
        print(f"{source:42} {before:6.2f} -> {after:6.2f}  ({100 * (after - before) / before:+.1f}%)")
    return EXIT_OK


def _max_piece_chars(model_proto: bytes) -> int:
    """The longest word a piece may hold: the trainer's piece length, less the word mark."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_proto)
    return max(proto.trainer_spec.max_sentencepiece_length - 1, 1)


if __name__ == "__main__":
    sys.exit(main())
