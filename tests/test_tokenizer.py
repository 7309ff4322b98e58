"""The joint SentencePiece tokenizer: fixed special ids, whole language tags, round trips."""

from __future__ import annotations

import pytest

from tests.conftest import bible_sentences
from training.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def test_special_ids_are_fixed(tokenizer):
    sp = tokenizer.sp
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tokenizer.vocab_size == 800


def test_language_tags_stay_whole(tokenizer):
    assert tokenizer.languages() == ["en", "de"]
    tag = tokenizer.tag_id("de")
    assert tokenizer.pieces([tag]) == ["<2de>"]
    assert tokenizer.encode("<2de> In the beginning")[0] in (tag, tokenizer.sp.piece_to_id("▁"))
    assert tag in tokenizer.encode("<2de> In the beginning")
    assert tokenizer.encode_source("In the beginning", "de")[0] == tag
    assert tokenizer.encode_source("In the beginning", "de")[-1] == EOS_ID
    with pytest.raises(KeyError, match="language 'fr' has no tag"):
        tokenizer.tag_id("fr")


@pytest.mark.parametrize("code", ["4", "e"])
def test_round_trip_on_held_out_text(tokenizer, code):
    for text in bible_sentences(code, 200, split="test"):
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_decode_drops_specials(tokenizer):
    ids = tokenizer.encode("Jesus wept.")
    assert tokenizer.decode([BOS_ID, *ids, EOS_ID, PAD_ID]) == "Jesus wept."
