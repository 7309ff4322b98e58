"""Growing a trained model's vocabulary: which words become pieces, that old ids keep their
meaning, that the segmentation changes only where a new piece spells a word, and the CLI."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from training.grow_vocab import SCORE_MARGIN, TRAIN_ROW, by_source, choose, grow, main, words
from training.tokenizer import Tokenizer
from training.warm_start import map_embeddings


def test_words_are_letters_only_without_the_punctuation_around_them():
    counts = words(["Hello! „Danke“, sagte er.", "Open /etc/hosts (2 times) — v1.2 OK?", "x Hello"], max_chars=8)
    assert counts == Counter({"Hello": 2, "Danke": 1, "sagte": 1, "er": 1, "Open": 1, "times": 1, "OK": 1})
    assert words(["Wiedersehen"], max_chars=8) == Counter()  # longer than a piece may be


def test_choose_ranks_words_by_pieces_saved(tokenizer):
    sp = tokenizer.sp
    counts = Counter({"Hello": 40, "Thankful": 30, "God": 1000, "the": 500})  # God and the are pieces already
    chosen = choose(tokenizer, counts, 5)
    spelled = {w: sp.encode(w, out_type=int) for w in ("Hello", "Thankful")}
    assert all(len(ids) >= 2 for ids in spelled.values())
    expected = sorted(((f"▁{w}", counts[w] * (len(ids) - 1), sum(sp.get_score(i) for i in ids) + SCORE_MARGIN)
                       for w, ids in spelled.items()), key=lambda r: -r[1])
    assert [(p, n) for p, n, _ in chosen] == [(p, n) for p, n, _ in expected]
    assert [s for _, _, s in chosen] == pytest.approx([s for _, _, s in expected])
    assert choose(tokenizer, counts, 1) == chosen[:1]


def test_grown_vocabulary_keeps_old_ids_and_spells_new_words_whole(tokenizer):
    chosen = choose(tokenizer, Counter({"Hello": 40, "Thankful": 30}), 2)
    grown = Tokenizer(model_proto=grow(tokenizer.model_proto, [(p, s) for p, _, s in chosen]))
    old_size = tokenizer.vocab_size
    assert grown.vocab_size == old_size + 2
    assert [grown.sp.id_to_piece(i) for i in range(old_size)] == [tokenizer.sp.id_to_piece(i) for i in range(old_size)]
    assert grown.pieces(grown.encode("Hello! Thankful")) == ["▁Hello", "!", "▁Thankful"]
    assert grown.decode(grown.encode("Hello! Thankful")) == "Hello! Thankful"
    # A sentence without the new words is spelled exactly as before.
    verse = "And God said, Let there be light: and there was light."
    assert grown.encode(verse) == tokenizer.encode(verse)
    assert grown.tag_id("de") == tokenizer.tag_id("de")
    with pytest.raises(ValueError, match="'▁Hello' is already a piece"):
        grow(grown.model_proto, [("▁Hello", -10.0)])


def test_warm_start_composes_the_new_rows_from_the_pieces_that_spelled_them(tokenizer):
    chosen = choose(tokenizer, Counter({"Hello": 40}), 1)
    grown = Tokenizer(model_proto=grow(tokenizer.model_proto, [(p, s) for p, _, s in chosen]))
    old = torch.randn(tokenizer.vocab_size, 8)
    new, counts = map_embeddings(old, tokenizer, grown)
    assert counts == {"copied": tokenizer.vocab_size, "composed": 1, "mean": 0}
    assert torch.equal(new[1:tokenizer.vocab_size], old[1:])
    spelled = [i for i in tokenizer.encode("Hello") if tokenizer.sp.id_to_piece(i) != "▁"]
    assert torch.allclose(new[grown.sp.piece_to_id("▁Hello")], old[spelled].mean(0))


def test_by_source_averages_directions():
    rows = {"en-de/catalogs": [10.0, 8.0], "de-en/catalogs": [12.0, 11.0], "en-de/bible": [30.0, 29.0]}
    assert by_source(rows) == {"catalogs": (11.0, 9.5), "bible": (30.0, 29.0)}
    assert by_source({"en-de": [5.0, 4.0]}) == {"en-de": (5.0, 4.0)}


def test_cli_writes_the_model_and_its_report(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "grown" / "tokenizer.model"
    assert main(["--from", str(tiny_checkpoint), "--add", "5", "--out", str(out)]) == 0
    grown = Tokenizer(out)
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["added"] == 5 and report["vocab_size"] == [400, 405] and grown.vocab_size == 405
    assert [p["piece"] for p in report["pieces"]] == [grown.sp.id_to_piece(i) for i in range(400, 405)]
    saved = [p["saved"] for p in report["pieces"]]
    assert saved == sorted(saved, reverse=True) and saved[-1] > 0
    (row,) = report["pieces_per_sentence"].items()  # the tiny run has no dev files
    assert row[0] == TRAIN_ROW and row[1][1] < row[1][0]  # its own words got shorter
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{out}: 400 -> 405 pieces (first added: {report['pieces'][0]['piece']}, ")
    assert lines[2].startswith(f"{TRAIN_ROW} ") and len(lines) == 3


@pytest.mark.parametrize("args, message", [
    (["--add", "0", "--out", "t.model"], "--add must be at least 1, got 0"),
    (["--add", "5", "--out", "t.spm"], "--out t.spm: give a .model file"),
    (["--add", "5", "--out", "t.model", "--sources", "{bible"], "--sources is not JSON"),
])
def test_cli_usage_errors(tiny_checkpoint, tmp_path, capsys, args, message):
    assert main(["--from", str(tiny_checkpoint), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m training.grow_vocab: error: {message}") and "Traceback" not in err
    assert not (tmp_path / "t.model").exists()


def test_cli_missing_model(tmp_path, capsys):
    missing = tmp_path / "nothing"
    assert main(["--from", str(missing), "--add", "5", "--out", str(tmp_path / "t.model")]) == 2
    err = capsys.readouterr().err
    assert err == f"python -m training.grow_vocab: error: --from: checkpoint {missing} does not exist\n"
