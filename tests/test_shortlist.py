"""engine/shortlist.py: what a shortlist learns from pairs, the union a batch may use, and its file;
export/shortlist_graph.py and the engine: the shortlist in a package, decoding and serving with it."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from engine.decoding import DecodeOptions
from engine.defaults import EOS_ID, UNK_ID
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from engine.shortlist import Shortlist, learn
from export.shortlist_graph import add_to_package, training_examples
from export.verify import decode_ids
from tests.conftest import bible_sentences

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


# ---------------------------------------------------------------- in a package, decoding


@pytest.fixture(scope="module")
def learned(tiny_checkpoint):
    examples, vocab = training_examples(tiny_checkpoint)
    return examples, vocab


def _with_shortlist(tiny_package, tmp_path, shortlist: Shortlist) -> ModelPackage:
    pkg = tmp_path / "tiny"
    shutil.copytree(tiny_package, pkg)
    return add_to_package(pkg, shortlist, {"frequent": 16, "per_source": 4})


def _runtime(package: ModelPackage, variant: str, shortlist: bool = True) -> Runtime:
    return Runtime(package, RuntimeOptions(device="cpu", threads=1, variant=variant, shortlist=shortlist))


def _sources(package: ModelPackage, n: int) -> list[list[int]]:
    from training.tokenizer import Tokenizer

    tok = Tokenizer(package.tokenizer_path)
    return [tok.encode_source(s, "de") for s in bible_sentences("4", n, split="test")]


def _tokens(rt: Runtime, sources, beam: int, n_best: int = 1) -> list[list[list[int]]]:
    return [[h.tokens for h in hyps] for hyps in decode_ids(rt, sources, DecodeOptions(beam_size=beam, n_best=n_best))]


def test_a_package_gets_the_shortlist_graphs_and_says_how_they_were_made(tiny_package, tmp_path, learned):
    package = _with_shortlist(tiny_package, tmp_path, learn(*learned, frequent=16, per_source=4))
    assert package.shortlist_variants == ("fp32", "int8", "int8w8") and "shortlist" in package.graphs
    assert package.provenance["shortlist"] == {"frequent": 16, "per_source": 4}
    assert _runtime(package, "int8").shortlist is not None
    assert _runtime(package, "int8", shortlist=False).shortlist is None
    with pytest.raises(ValueError, match="the shortlist is for a vocabulary of 10; the package has 400"):
        add_to_package(package.path, Shortlist(10, {}, {}, {}), {})


def test_the_step_scores_the_given_pieces_each_row_normalised_over_its_own(tiny_package, tmp_path, learned):
    package = _with_shortlist(tiny_package, tmp_path, learn(*learned, frequent=16, per_source=4))
    for variant in ("fp32", "int8"):
        rt = _runtime(package, variant)
        b, s, v = 3, 5, package.dims.vocab_size
        rng = np.random.default_rng(0)
        shape = (b, package.dims.n_heads, package.dims.d_head)
        cross_k = [rng.standard_normal((*shape, s)).astype(np.float32) for _ in range(rt.n_layers)]
        cross_v = [np.ascontiguousarray(c.swapaxes(2, 3)) for c in cross_k]
        empty_k = [rt.cache(b, 0, keys=True) for _ in range(rt.n_layers)]
        empty_v = [rt.cache(b, 0) for _ in range(rt.n_layers)]
        args = (np.array([[5], [9], [12]]), np.zeros((b, 1), np.int64), np.zeros((b, 0), bool), np.ones((b, s), bool),
                cross_k, cross_v, empty_k, empty_v)
        full = rt.step(*args)[0].astype(np.float64)
        everything = rt.step(*args, vocab=(np.arange(v), np.ones((b, v), bool)))[0]
        np.testing.assert_allclose(everything, full, atol=1e-5)
        ids = np.array([3, 7, 20, 100, 399])
        mask = np.array([[1, 1, 1, 1, 1], [1, 0, 1, 0, 1], [0, 1, 0, 0, 0]], bool)
        got = rt.step(*args, vocab=(ids, mask))[0]
        for row in range(b):
            own = ids[mask[row]]
            expected = full[row, own] - np.log(np.exp(full[row, own]).sum())
            np.testing.assert_allclose(got[row, mask[row]], expected, atol=1e-5)
            assert np.all(np.isneginf(got[row, ~mask[row]]))


def test_with_every_piece_allowed_the_tokens_are_the_full_vocabulary_s(tiny_package, tmp_path, learned):
    vocab = learned[1]
    everything = {lang: np.arange(vocab, dtype=np.int32) for lang in ("de", "en")}
    nothing_more = {lang: np.zeros(vocab + 1, np.int64) for lang in everything}
    package = _with_shortlist(tiny_package, tmp_path, Shortlist(vocab, everything, nothing_more,
                                                                {lang: np.zeros(0, np.int32) for lang in everything}))
    sources = _sources(package, 12)
    for variant in ("fp32", "int8"):
        with_it, without = _runtime(package, variant), _runtime(package, variant, shortlist=False)
        assert with_it.allowed(sources[0]).size == vocab
        for beam, n_best in ((1, 1), (4, 1), (4, 3)):
            assert _tokens(with_it, sources, beam, n_best) == _tokens(without, sources, beam, n_best), (variant, beam)


def test_int8_text_alone_equals_the_same_text_in_a_batch_with_a_shortlist(tiny_package, tmp_path, learned):
    """Each row is normalised over its own job's shortlist, not the batch's union: the batch
    around a text does not change it."""
    package = _with_shortlist(tiny_package, tmp_path, learn(*learned, frequent=16, per_source=4))
    rt = _runtime(package, "int8")
    sources = _sources(package, 16)
    sizes = {rt.allowed(s).size for s in sources}
    assert max(sizes) < package.dims.vocab_size and len(sizes) > 1  # restrictive, and not the same for all
    for beam in (1, 4):
        together = _tokens(rt, sources, beam)
        alone = [_tokens(rt, [s], beam)[0] for s in sources]
        assert together == alone, beam


def test_jobs_joining_and_leaving_a_running_batch_decode_as_alone_with_a_shortlist(tiny_package, tmp_path, learned):
    """Continuous batching: newcomers with pieces the batch's union lacks widen it, leavers'
    rows move with their masks; every text still decodes as it does alone (int8)."""
    from engine.decoding import Batch, encode_jobs
    from export.verify import source_jobs

    package = _with_shortlist(tiny_package, tmp_path, learn(*learned, frequent=16, per_source=4))
    rt = _runtime(package, "int8")
    sources = _sources(package, 12)
    alone = [_tokens(rt, [s], beam)[0] for s, beam in zip(sources, [1, 4] * 6)]
    jobs = [source_jobs(rt, [s], DecodeOptions(beam_size=beam))[0] for s, beam in zip(sources, [1, 4] * 6)]
    batch = Batch(rt)
    batch.add(encode_jobs(rt, jobs[:4]))
    unions = [batch.vocab.size]
    waiting = jobs[4:]
    while batch.jobs or waiting:
        batch.remove({j.id for j in batch.step()})
        if waiting and len(batch.jobs) < 6:
            batch.add(encode_jobs(rt, waiting[:2]))
            waiting = waiting[2:]
            unions.append(batch.vocab.size)
        for j in batch.jobs:  # each live row may use exactly its own job's pieces
            own = sorted(set(rt.allowed(j.src).tolist()) - {0})
            assert all(batch.vocab[batch.vocab_mask[r]].tolist() == own for r in batch.rows_of[j.id])
    assert max(unions) > unions[0]  # newcomers widened it
    assert [[h.tokens for h in j.result] for j in jobs] == alone


def test_the_server_uses_the_shortlist_unless_told_not_to(tiny_package, tmp_path, learned):
    from tests.server_harness import ServerThread, request

    package = _with_shortlist(tiny_package, tmp_path, learn(*learned, frequent=16, per_source=4))
    for on in (True, False):
        s = ServerThread(package.path, int8=True, shortlist=on)
        try:
            assert (s.scheduler.rt.shortlist is not None) is on
            answer = s.stub().Translate(request("Jesus wept.", "He said,"), timeout=30)
            assert len(answer.translations) == 2 and all(t.hypotheses for t in answer.translations)
        finally:
            s.stop()


def test_the_columns_are_gathered_when_the_batch_s_pieces_change_not_at_every_step(tiny_package, tmp_path, learned):
    package = _with_shortlist(tiny_package, tmp_path, learn(*learned, frequent=16, per_source=4))
    rt = _runtime(package, "int8")
    gathers, steps = [], []
    table, step = rt.shortlist_table, rt.step

    class Counted:
        def run(self, *args):
            gathers.append(1)
            return table.run(*args)

    def counted_step(*args, **kwargs):
        steps.append(1)
        return step(*args, **kwargs)

    rt.shortlist_table, rt.step = Counted(), counted_step
    _tokens(rt, _sources(package, 8), 1)
    # Built when the 8 join; again only when half of those it was built for have left (8 -> 4 -> 2 -> 1).
    assert 1 <= len(gathers) <= 4 < len(steps)


def test_nmt_export_adds_the_shortlist_beside_the_checkpoint_unless_told_not_to(tiny_checkpoint, learned, tmp_path,
                                                                                 capsys):
    """A shipped model's shortlist.npz (beside its model.pt) goes into every package exported from
    it; --no-shortlist leaves it out; a shortlist that cannot serve the model is refused before any
    work, with nothing written."""
    from export.onnx_export import SHORTLIST_BESIDE
    from export.onnx_export import main as export_main

    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(tiny_checkpoint, model / "model.pt")
    shortlist = learn(*learned, frequent=16, per_source=4)
    shortlist.save(model / SHORTLIST_BESIDE)
    assert export_main([str(model / "model.pt"), str(tmp_path / "with"), "--int8"]) == 0
    package = ModelPackage.load(tmp_path / "with")
    assert package.shortlist_variants == ("fp32", "int8", "int8w8")
    assert package.provenance["shortlist"]["file"] == SHORTLIST_BESIDE
    assert Shortlist.load(package.path / "shortlist.npz").languages == shortlist.languages
    assert export_main([str(model / "model.pt"), str(tmp_path / "without"), "--no-shortlist"]) == 0
    assert ModelPackage.load(tmp_path / "without").shortlist_variants == ()

    small = Shortlist(vocab_size=shortlist.vocab_size - 1, frequent={}, offsets={}, targets={})
    small.save(tmp_path / "small.npz")
    capsys.readouterr()
    bad = [str(model / "model.pt"), str(tmp_path / "bad"), "--shortlist", str(tmp_path / "small.npz")]
    assert export_main(bad) == 2
    assert (f"shortlist {tmp_path / 'small.npz'} is for a vocabulary of {shortlist.vocab_size - 1}; the model has "
            f"{shortlist.vocab_size}") in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
