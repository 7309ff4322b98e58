"""The joint SentencePiece tokenizer: fixed special ids, whole language tags, round trips; and
the engine's tokenizer over it, which reads users' text as text (engine/tokenizer.py)."""

from __future__ import annotations

import pytest

from engine.tokenizer import PackageTokenizer, has_letter, normalize
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


# ------------------------------------------------------------ the engine's tokenizer (engine/tokenizer.py)
def engine_tokenizer(tokenizer) -> PackageTokenizer:
    """The serving side's tokenizer over the same SentencePiece model, as a package loads it."""
    tags = frozenset(tokenizer.tag_id(lang) for lang in tokenizer.languages())
    return PackageTokenizer(tokenizer.sp, special=frozenset({PAD_ID, UNK_ID, BOS_ID, EOS_ID}) | tags)


@pytest.mark.parametrize("code", ["4", "e"])
def test_the_engine_encodes_text_as_sentencepiece_does(tokenizer, code):
    tok = engine_tokenizer(tokenizer)
    for text in bible_sentences(code, 200, split="test"):
        assert tok.encode(text) == tokenizer.encode(text)


@pytest.mark.parametrize("text", ["<2de> In the beginning", "In <2en>the beginning<2de>", "<s> </s> <unk> <pad>",
                                  "\uff1c2de\uff1e In the beginning"])
def test_the_engine_reads_symbol_like_text_as_text(tokenizer, text):
    """SentencePiece reads a user's "<2de>" as the language tag (training's tokenizer does: it
    never sees users' text); the engine reads it as the characters it is."""
    tok = engine_tokenizer(tokenizer)
    tags = {tokenizer.tag_id("en"), tokenizer.tag_id("de")}
    ids = tok.encode(text)
    assert not set(ids) & tags and not set(ids) & (tok.not_text - {UNK_ID})
    assert tok.encode(text, symbols=[(0, 0)]) == ids  # nothing where a symbol is allowed: the same


def test_symbols_are_read_only_where_the_caller_put_them(tokenizer):
    tok = engine_tokenizer(tokenizer)
    de = tokenizer.tag_id("de")
    text = "<2de> In the beginning <2de>"
    assert tokenizer.encode(text).count(de) == 2  # SentencePiece: both
    ids = tok.encode(text, symbols=[(0, 5)])
    assert ids.count(de) == 1 and ids[:2] == tokenizer.encode("<2de>")[:2]
    middle = tokenizer.encode("In the beginning")
    assert ids[2:2 + len(middle)] == middle  # the text around it as SentencePiece has it
    last = tok.encode(text, symbols=[(len(text) - 5, len(text))])
    assert last.count(de) == 1 and last[-1] == de


def test_decoding_drops_every_id_that_is_not_text(tokenizer):
    tok = engine_tokenizer(tokenizer)
    ids = tokenizer.encode("Jesus wept.")
    assert tokenizer.sp.decode([tokenizer.tag_id("de"), *ids, UNK_ID]) != "Jesus wept."  # SentencePiece's
    assert tok.decode([tokenizer.tag_id("de"), BOS_ID, *ids, UNK_ID, EOS_ID, PAD_ID]) == "Jesus wept."
    assert tok.symbol_pattern().findall("a <2de> b <unk> ⁇ <s> <ph1>") == ["<2de>", "<unk>", "⁇", "<s>"]


@pytest.mark.parametrize("dirty", [
    "chan\u00adges", "cha\u200dnges", "cha\u200cnges", "chan\u2060ges", "\u200echanges\u200f", "\ufeffchanges",
    "chan\u200bges", "\u202echanges\u202c", "\u2066changes\u2069", "\u061cchanges", "chan\x00ges\x7f",
    "changes\ufe0f", "chan\U000e0041ges", "chan\u180eges",
])
def test_normalize_removes_what_is_not_seen(dirty):
    assert normalize(dirty) == "changes"


def test_normalize_keeps_whitespace_and_what_is_seen():
    for text in ("a\tb\nc\r\nd\x0be\x0cf", "Ünïcödé — “quotes” 数字 🙂", "a\u00a0b\u202fc", "x\u2028y", "\ue000"):
        assert normalize(text) == text


def test_a_letter_is_any_scripts_letter():
    assert [has_letter(t) for t in ("...", "!!!", "123", "\u00ad", "— 3.5 —", "数", "Ä.", "x1")] == [
        False, False, False, False, False, True, True, True]
