"""The Bible corpus, its clean-up and split, user corpora, and token-bucketed batches."""

from __future__ import annotations

import pytest

from training.config import BOS_ID, EOS_ID, PAD_ID, DataConfig
from training.data import (
    BIBLE_VERSIONS,
    BatchStream,
    Example,
    bible_pairs,
    clean,
    collate,
    load_bible,
    read_parallel,
    token_batches,
)


@pytest.mark.parametrize("code", sorted(c for versions in BIBLE_VERSIONS.values() for c in versions))
def test_every_translation_has_all_31102_verses_before_filtering(code):
    verses = load_bible(code)
    assert len(verses) == 31102
    assert verses[(43, 1, 1)]  # John 1:1 is there


def test_copyrighted_or_unknown_versions_are_refused():
    with pytest.raises(ValueError, match="is not one we may use"):
        load_bible("n")


def test_clean_strips_markers_backticks_and_whitespace():
    assert clean("(7:26) L'Éternel  dit\u00ad à Moïse:\tVa") == "L'Éternel dit à Moïse: Va"
    assert clean("God`s Spirit") == "God's Spirit"
    assert clean("(8:1)") == ""


def test_split_by_book_mark_is_dev_john_is_test():
    cfg = DataConfig(directions=("en-de",))
    dev, test = bible_pairs(cfg, "dev"), bible_pairs(cfg, "test")
    assert {p.key[0] for p in dev} == {41}
    assert {p.key[0] for p in test} == {43}
    assert len(dev) == 678 and len(test) == 879  # primary versions only: one pair per verse
    train = bible_pairs(DataConfig(directions=("de-en",)), "train")
    assert not {41, 43} & {p.key[0] for p in train}
    assert len({p.key[0] for p in train}) == 64


def test_extra_english_versions_are_extra_training_sources_only():
    cfg = DataConfig(directions=("en-de", "de-en"))
    train = bible_pairs(cfg, "train")
    en_de = [p for p in train if p.direction == "en-de"]
    de_en = [p for p in train if p.direction == "de-en"]
    assert len(en_de) > 2.9 * len(de_en)  # WEB, KJV and BBE sources against one German target
    key = (1, 1, 1)
    assert {p.src for p in en_de if p.key == key} == {clean(load_bible(c)[key]) for c in ("4", "k", "3")}
    assert {p.tgt for p in de_en if p.key == key} == {clean(load_bible("4")[key])}
    assert all(p.src and p.tgt for p in train)


@pytest.mark.parametrize("direction", ["en-fr", "fr-en", "en-es", "es-en", "de-en"])
def test_every_supported_direction_loads(direction):
    test = bible_pairs(DataConfig(directions=(direction,)), "test")
    assert len(test) == 879 and all(p.direction == direction for p in test)
    first = dict(zip(("en", "de", "fr", "es"), ("4", "e", "l", "v")))
    src, tgt = direction.split("-")
    assert (test[0].src, test[0].tgt) == (clean(load_bible(first[src])[(43, 1, 1)]),
                                          clean(load_bible(first[tgt])[(43, 1, 1)]))


def test_unknown_direction_and_language_are_refused():
    with pytest.raises(ValueError, match="direction 'ende' must look like 'en-de'"):
        bible_pairs(DataConfig(directions=("ende",)), "dev")
    with pytest.raises(ValueError, match="no Bible version configured for language 'it'"):
        bible_pairs(DataConfig(directions=("en-it",)), "dev")


def test_read_parallel_files_and_tsv(tmp_path):
    (tmp_path / "a.en").write_text("Hello\n\nHow are you?\n")
    (tmp_path / "a.de").write_text("Hallo\nLeer\nWie geht es?\n")
    assert read_parallel(f"{tmp_path}/a.en:{tmp_path}/a.de") == [("Hello", "Hallo"), ("How are you?", "Wie geht es?")]
    (tmp_path / "b.tsv").write_text("one\teins\n\ntwo\tzwei\n")
    assert read_parallel(str(tmp_path / "b.tsv")) == [("one", "eins"), ("two", "zwei")]
    (tmp_path / "c.tsv").write_text("one\teins\tuno\n")
    with pytest.raises(ValueError, match=r"c\.tsv:1: expected 2 tab-separated columns, found 3"):
        read_parallel(str(tmp_path / "c.tsv"))
    (tmp_path / "short.de").write_text("Hallo\n")
    with pytest.raises(ValueError, match="has 3 lines but"):
        read_parallel(f"{tmp_path}/a.en:{tmp_path}/short.de")


def _examples(n: int) -> list[Example]:
    return [Example([10] * (1 + i % 17) + [EOS_ID], [11] * (1 + (i * 7) % 23)) for i in range(n)]


def test_token_batches_respect_the_budget_and_cover_every_example():
    examples = _examples(500)
    batches = token_batches(examples, batch_tokens=200, seed=1, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        cost = len(b) * (max(len(examples[i].src) for i in b) + max(len(examples[i].tgt) + 1 for i in b))
        assert cost <= 200 or len(b) == 1
    assert token_batches(examples, 200, 1, 0) == batches  # deterministic
    assert token_batches(examples, 200, 1, 1) != batches  # reshuffled per epoch


def test_collate_adds_bos_eos_and_pads():
    batch = collate([Example([5, 6, EOS_ID], [7, 8]), Example([5, EOS_ID], [9])])
    assert batch.src.tolist() == [[5, 6, EOS_ID], [5, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 7, 8], [BOS_ID, 9, PAD_ID]]
    assert batch.tgt_out.tolist() == [[7, 8, EOS_ID], [9, EOS_ID, PAD_ID]]
    assert batch.n_tokens == 5


def test_batch_stream_resumes_mid_epoch_and_splits_ranks():
    examples = _examples(300)
    stream = BatchStream(examples, 150, seed=3)
    it = iter(stream)
    first = [next(it).src.tolist() for _ in range(5)]
    state = stream.state_dict()
    rest = [next(it).src.tolist() for _ in range(40)]  # crosses an epoch boundary
    resumed = BatchStream(examples, 150, seed=3)
    resumed.load_state_dict(state)
    it2 = iter(resumed)
    assert [next(it2).src.tolist() for _ in range(40)] == rest
    assert first
    r0, r1 = BatchStream(examples, 150, 3, rank=0, world=2), BatchStream(examples, 150, 3, rank=1, world=2)
    b0, b1 = r0._epoch_batches(), r1._epoch_batches()
    assert len(b0) == len(b1)
    assert not {tuple(b) for b in b0} & {tuple(b) for b in b1}


def test_mixed_sources_include_the_phrasebook_and_its_name_swaps():
    from training.data import MIXED_SOURCES, source_pairs

    assert {"phrasebook", "phrasebook-names", "debian-messages"} <= set(MIXED_SOURCES)
    cfg = DataConfig(corpus="mixed", directions=("de-en",), sources={"phrasebook-names": 1.0})
    got = source_pairs(cfg, "phrasebook-names", "train")
    assert (got[0].src_lang, got[0].tgt_lang, got[0].src, got[0].tgt) == ("de", "en", "Hallo, ich heiße Mary.",
                                                                          "Hello, my name is Mary.")
    assert len(got) == 2915 and source_pairs(cfg, "phrasebook-names", "dev") == []
