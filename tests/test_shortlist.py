"""engine/shortlist.py: what a shortlist learns from pairs, the union a batch may use, and its file."""

from __future__ import annotations

import numpy as np
import pytest

from engine.defaults import EOS_ID, UNK_ID
from engine.shortlist import Shortlist, learn

V = 40
# Target language "de": source piece 10 is always translated with 20 (and once with 21), 11 with
# 22; 30 occurs in every German target (frequent). "fr": 10 goes with 25.
PAIRS = ([([5, 10, 3], [30, 20], "de")] * 3 + [([5, 10, 11, 3], [30, 20, 21, 22], "de")]
         + [([5, 11, 3], [30, 22], "de")] * 2 + [([6, 10, 3], [25, 31], "fr")] * 2)


def test_learns_frequent_pieces_and_what_each_source_piece_goes_with():
    s = learn(PAIRS, V, frequent=1, per_source=2, min_cooccurrence=2)
    assert s.languages == ["de", "fr"]
    assert s.frequent["de"].tolist() == [30] and s.frequent["fr"].tolist() == [25]  # ties: the lower id
    de = s.offsets["de"], s.targets["de"]
    listed = {src: de[1][de[0][src]:de[0][src + 1]].tolist() for src in range(V) if de[0][src + 1] > de[0][src]}
    # 10 goes with 20 (4 sentences), 22 and 21 once each (under min_cooccurrence); 30 is frequent.
    # 5 and 3 (the tag and eos) are in every sentence: they go with everything seen twice.
    assert listed == {3: [20, 22], 5: [20, 22], 10: [20], 11: [22]}


def test_a_batch_may_use_the_union_of_its_sources_lists_the_frequent_pieces_specials_and_its_own_pieces():
    s = learn(PAIRS, V, frequent=1, per_source=2, min_cooccurrence=2)
    assert s.ids([[11]], "de").tolist() == sorted({UNK_ID, EOS_ID, 30, 11, 22})
    assert s.ids([[10], [11, 39]], "de").tolist() == sorted({UNK_ID, EOS_ID, 30, 10, 20, 11, 22, 39})
    assert s.ids([[10]], "fr").tolist() == sorted({UNK_ID, EOS_ID, 25, 10, 31})
    assert s.ids([], "de").tolist() == sorted({UNK_ID, EOS_ID, 30})
    with pytest.raises(KeyError, match="the shortlist has no target language 'es'; it has de, fr"):
        s.ids([[10]], "es")


def test_saved_and_loaded_unchanged_and_a_bad_file_is_refused(tmp_path):
    s = learn(PAIRS, V, frequent=2, per_source=3, min_cooccurrence=1)
    s.save(tmp_path / "shortlist.npz")
    back = Shortlist.load(tmp_path / "shortlist.npz")
    assert back.vocab_size == V and back.languages == s.languages
    for lang in s.languages:
        for part in ("frequent", "offsets", "targets"):
            assert np.array_equal(getattr(back, part)[lang], getattr(s, part)[lang]), (lang, part)
    broken = Shortlist(V, s.frequent, {**s.offsets, "de": s.offsets["de"][:-1]}, s.targets)
    broken.save(tmp_path / "broken.npz")
    with pytest.raises(ValueError, match="the shortlist of 'de' is inconsistent"):
        Shortlist.load(tmp_path / "broken.npz")
