"""training/force_score.py on the session's tiny trained checkpoint: a greedy translation is the
model's own first choice at every piece, totals add up, and the command's output and errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training import checkpoint as ckpt_io
from training.decode import greedy_search
from training.force_score import main, score, score_ids

SOURCE = "The house is small."


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint: Path):
    model, _, ckpt = ckpt_io.load_model(tiny_checkpoint, "cpu")
    return model, ckpt_io.load_tokenizer(ckpt)


def test_the_greedy_translation_is_rank_0_at_every_piece(loaded):
    model, tok = loaded
    src = tok.encode_source(SOURCE, "de")
    hyp = greedy_search(model, torch.tensor([src]))[0].tokens
    scored = score_ids(model, src, hyp)
    assert len(scored) == len(hyp) + 1  # and the end of sentence
    assert [rank for _, rank in scored] == [0] * len(scored)
    assert all(logprob <= 0 for logprob, _ in scored)


def test_candidates_come_back_in_order_with_their_pieces(loaded):
    model, tok = loaded
    good, bad = tok.decode(greedy_search(model, torch.tensor([tok.encode_source(SOURCE, "de")]))[0].tokens), "Haus"
    a, b = score(model, tok, SOURCE, "de", [good, bad])
    assert (a.text, b.text) == (good, bad)
    assert [p.piece for p in b.pieces] == [*tok.pieces(tok.encode(bad)), "</s>"]
    assert a.total == pytest.approx(sum(p.logprob for p in a.pieces))
    assert a.mean == pytest.approx(a.total / len(a.pieces))
    assert [p.logprob for p in b.worst(2)] == sorted(p.logprob for p in b.pieces)[:2]


def test_the_command_prints_each_candidate_and_refuses_unknown_input(tiny_checkpoint: Path, capsys):
    assert main([str(tiny_checkpoint), "-t", "de", SOURCE, "Das Haus ist klein.", "Haus"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4
    assert out[0].endswith("  Das Haus ist klein.") and out[2].endswith("  Haus")
    assert out[1].lstrip().startswith("least likely: ") and "(rank " in out[1]
    assert main([str(tiny_checkpoint), "-t", "fr", SOURCE, "x"]) == 2
    assert capsys.readouterr().err == ("python -m training.force_score: error: language 'fr' has no tag in this "
                                       "model; known: en, de\n")
    assert main([str(tiny_checkpoint), "-t", "de", SOURCE, "Haus " * 300]) == 2
    assert capsys.readouterr().err == ("python -m training.force_score: error: the source or a candidate is longer "
                                       "than the model's 256 positions: score one sentence at a time\n")
    assert main([str(tiny_checkpoint.parent / "nowhere.pt"), "-t", "de", SOURCE, "x"]) == 2
    assert capsys.readouterr().err.startswith("python -m training.force_score: error: ")
