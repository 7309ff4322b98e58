"""How likely a checkpoint finds given translations of one source, piece by piece (teacher forcing).

    python -m training.force_score models/default -t de \\
        "Please restart your computer before installing the update." \\
        "Bitte starten Sie Ihren Computer neu, bevor Sie die Aktualisierung installieren." \\
        "Bitte starten Sie Ihren Computer, bevor Sie die Aktualisierung installieren."

For each candidate: its total log-probability (natural log, end of sentence included), the mean
per piece, and its least likely pieces with their log-probability and rank (0: the piece the model
would have picked there itself). It answers "why does the model write X and not Y": a beam that
never keeps Y is a search question when Y scores higher, a model question when it scores lower,
and the weak piece says where. The source is encoded as it is given (no placeholders for URLs or
numbers, which the server would add).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch

from cli import EXIT_OK, EXIT_USAGE, ArgumentParser, UsageError, exit_status_help, fail
from engine.defaults import BOS_ID, EOS_ID
from training import checkpoint as ckpt_io
from training.model import Transformer
from training.tokenizer import Tokenizer

WORST = 3  # least likely pieces shown per candidate


@dataclass(frozen=True)
class PieceScore:
    piece: str
    logprob: float
    rank: int  # how many pieces the model found more likely at this position


@dataclass(frozen=True)
class CandidateScore:
    text: str
    pieces: tuple[PieceScore, ...]  # the candidate's pieces, then the end of sentence

    @property
    def total(self) -> float:
        return sum(p.logprob for p in self.pieces)

    @property
    def mean(self) -> float:
        return self.total / len(self.pieces)

    def worst(self, n: int = WORST) -> list[PieceScore]:
        return sorted(self.pieces, key=lambda p: p.logprob)[:n]


@torch.no_grad()
def score_ids(model: Transformer, src_ids: list[int], ids: list[int]) -> list[tuple[float, int]]:
    """(log-probability, rank) of each of ``ids`` and of the end of sentence after them, given the
    source ids (target tag first, end of sentence last) and the pieces before it."""
    model.eval()
    target = [*ids, EOS_ID]
    logits = model(torch.tensor([src_ids]), torch.tensor([[BOS_ID, *ids]]))[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp[torch.arange(len(target)), torch.tensor(target)]
    ranks = (logp > chosen[:, None]).sum(dim=-1)
    return [(float(v), int(r)) for v, r in zip(chosen, ranks)]


def score(model: Transformer, tokenizer: Tokenizer, source: str, target_lang: str,
          candidates: list[str]) -> list[CandidateScore]:
    """Each candidate's pieces scored under the model, given ``source`` and the target tag."""
    src = tokenizer.encode_source(source, target_lang)
    limit = model.cfg.max_positions
    out = []
    for text in candidates:
        ids = tokenizer.encode(text)
        if max(len(src), len(ids) + 1) > limit:
            raise UsageError(f"the source or a candidate is longer than the model's {limit} positions: "
                             "score one sentence at a time")
        names = [*tokenizer.pieces(ids), "</s>"]
        out.append(CandidateScore(text, tuple(PieceScore(n, v, r)
                                              for n, (v, r) in zip(names, score_ids(model, src, ids)))))
    return out


def render(scores: list[CandidateScore]) -> str:
    lines = []
    for s in scores:
        weak = ", ".join(f"{p.piece} {p.logprob:.2f} (rank {p.rank})" for p in s.worst())
        lines.append(f"{s.total:9.2f} {s.mean:7.3f}  {s.text}\n{'':18}least likely: {weak}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m training.force_score", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=exit_status_help(EXIT_USAGE))
    p.add_argument("checkpoint", help="a checkpoint file, a shipped model's directory or a run directory")
    p.add_argument("source", help="the source text")
    p.add_argument("candidates", nargs="+", help="translations to score")
    p.add_argument("-t", "--target", required=True, help="target language (its tag must be in the tokenizer)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        model, _, ckpt = ckpt_io.load_model(args.checkpoint, "cpu")
        tokenizer = ckpt_io.load_tokenizer(ckpt)
        if args.target not in tokenizer.languages():
            raise UsageError(f"language {args.target!r} has no tag in this model; known: "
                             f"{', '.join(tokenizer.languages())}")
        print(render(score(model, tokenizer, args.source, args.target, args.candidates)))
    except (FileNotFoundError, ValueError) as e:  # UsageError is a ValueError
        return fail("python -m training.force_score", str(e), EXIT_USAGE)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
