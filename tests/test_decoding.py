"""The server's continuous-batching decoder against the PyTorch reference."""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pytest
import torch

from engine.decoding import (
    SAMPLE_STRIDE,
    Batch,
    DecodeOptions,
    Hypothesis,
    Job,
    beam_rows,
    best_candidates,
    decode_all,
    encode_jobs,
    length_groups,
    whole_vectors,
)
from engine.defaults import BOS_ID, EOS_ID, PAD_ID, SERVER_SPIN, default_max_len
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from engine.shortlist import learn
from export.shortlist_graph import add_to_package, training_examples
from tests.server_harness import TEXTS, session_entry
from training import checkpoint as ckpt_io
from training.decode import beam_search, greedy_search


@pytest.fixture(scope="module")
def setup(tiny_package, tiny_checkpoint):
    rt = Runtime(ModelPackage.load(tiny_package), RuntimeOptions(device="cpu", threads=1))
    model, _, ckpt = ckpt_io.load_model(tiny_checkpoint)
    return rt, model, ckpt_io.load_tokenizer(ckpt)


def job(tok, text: str, max_len: int = 0, banned: tuple[int, ...] = (), prefix: tuple[int, ...] = (),
        **opts) -> Job:
    src = tok.encode_source(text, "de")
    return Job(src, DecodeOptions(**opts), max_len=max_len or default_max_len(len(src), 255), bos=BOS_ID,
               eos=EOS_ID, pad=PAD_ID, banned=banned, prefix=prefix)


def reference_greedy(model, tok, text):
    src = torch.tensor([tok.encode_source(text, "de")])
    return greedy_search(model, src)[0]


def test_best_candidates_equal_a_stable_sort():
    """Beam search's selection: the m best, best first, ties to the lower index, on peaked and
    flat rows, with ties at the boundary, dead (-inf) beams, and sizes around the sampling edge."""
    rng = np.random.default_rng(0)
    cases = [np.log(rng.dirichlet(np.full(n, a), size=k)).astype(np.float32).reshape(-1)
             for n, a, k in ((8000, 0.1, 4), (8000, 5.0, 4), (500, 1.0, 2), (30, 1.0, 1))]
    tied = np.round(rng.standard_normal(4000), 1).astype(np.float32)  # many exact ties
    dead = np.concatenate([cases[0][:8000], np.full(3 * 8000, -np.inf, dtype=np.float32)])  # step 0 of a beam
    small = np.array([0.5, -1.0, 0.5, 2.0, -np.inf], dtype=np.float32)
    for cand in [*cases, tied, dead, small]:
        for m in (1, 2, 8, SAMPLE_STRIDE * 8 // 2):
            expected = np.argsort(-cand, kind="stable")[:m]
            assert best_candidates(cand, m).tolist() == expected.tolist(), (cand.size, m)


def test_beam_rows_move_beams_into_their_parents_rows():
    """Re-ranked beams take their parents' rows; only a second child is copied, into a row no
    beam claimed; dead beams take what is left, uncopied."""
    rows = np.array([10, 11, 12, 13])
    # beam 0 extends old beam 1, beams 1 and 2 both extend old beam 0, beam 3 old beam 2; old beam 3 has no child
    new, to, of = beam_rows(rows, np.array([1, 0, 0, 2]), np.array([True, True, True, True]))
    assert new.tolist() == [11, 10, 13, 12] and (to, of) == ([13], [10])
    new, to, of = beam_rows(rows, np.array([2, 2, 0, 0]), np.array([True, True, False, False]))
    assert new.tolist() == [12, 10, 11, 13] and (to, of) == ([10], [12])
    new, to, of = beam_rows(rows, np.array([0, 1, 2, 3]), np.ones(4, dtype=bool))
    assert new.tolist() == [10, 11, 12, 13] and (to, of) == ([], [])


def test_greedy_alone_equals_reference(setup):
    rt, model, tok = setup
    for text in TEXTS:
        [[hyp]] = decode_all(rt, [job(tok, text)])
        ref = reference_greedy(model, tok, text)
        assert hyp.tokens == ref.tokens
        assert hyp.score == pytest.approx(ref.score, abs=1e-3)


def test_beam_n_best_equals_reference(setup):
    rt, model, tok = setup
    for text in TEXTS:
        [hyps] = decode_all(rt, [job(tok, text, beam_size=4, n_best=3)])
        src = torch.tensor([tok.encode_source(text, "de")])
        ref = beam_search(model, src, beam_size=4, n_best=3)[0]
        assert [h.tokens for h in hyps] == [h.tokens for h in ref]
        assert [round(h.score, 3) for h in hyps] == [round(h.score, 3) for h in ref]


def test_staggered_joins_mixed_greedy_and_beam_give_the_solo_results(setup):
    """Jobs join a running batch at different steps, with different beam sizes."""
    rt, _, tok = setup
    solo = [decode_all(rt, [job(tok, t, beam_size=1 + i % 3, n_best=1)])[0] for i, t in enumerate(TEXTS)]
    batch = Batch(rt)
    jobs = [job(tok, t, beam_size=1 + i % 3, n_best=1) for i, t in enumerate(TEXTS)]
    pending = list(jobs)
    steps = 0
    joined: dict[int, int] = {}
    while pending or batch.jobs:
        if pending and steps % 2 == 0:  # one or two newcomers every other step
            new, pending = pending[:2], pending[2:]
            batch.add(encode_jobs(rt, new))
            joined.update((j.id, steps) for j in new)
        batch.remove({j.id for j in batch.step()})
        steps += 1
        # Rows stay dense (each job owns distinct rows below n) ...
        owned = np.concatenate([batch.rows_of[j.id] for j in batch.jobs]) if batch.jobs else np.zeros(0)
        assert batch.n == len(owned) == len(set(owned.tolist())) and (owned < batch.n).all()
        # ... and the cache holds no more slots than the oldest live job is old, plus growth room.
        oldest = max((steps - joined[j.id] for j in batch.jobs), default=0)
        assert batch.capacity[1] <= oldest + 3 * Batch.SLOT_CHUNK
        # Each row's cache holds its tokens at their positions, as alone, whenever it joined
        # (the order of the attention's sums then does not depend on the batch).
        for j in batch.jobs:
            used = batch.past_mask[batch.rows_of[j.id]]
            assert (used == (np.arange(used.shape[1]) < j.step)).all(), (j.id, j.step, used.nonzero())
        # Slots and source positions come in whole 16-column vectors (VECTOR_COLUMNS).
        _, slots, width = batch.capacity
        assert slots == whole_vectors(slots) and width == whole_vectors(width)
    for j, s in zip(jobs, solo):
        assert [h.tokens for h in j.result] == [h.tokens for h in s]


def test_hidden_slots_are_never_read(setup):
    """What a row's cache holds in slots its mask hides has no effect on any bit it decodes: beam
    re-ranking copies a parent's values only up to the slots it has written (Batch.step), and
    rows reused by newcomers keep whatever their last job left. Every hidden slot is filled with
    a huge value after every step, and every job still decodes its solo tokens and scores."""
    rt, _, tok = setup
    texts = TEXTS[:6]
    solo = [decode_all(rt, [job(tok, t, beam_size=2 + i % 3, n_best=2)])[0] for i, t in enumerate(texts)]
    jobs = [job(tok, t, beam_size=2 + i % 3, n_best=2) for i, t in enumerate(texts)]

    def fill_hidden(batch: Batch) -> None:
        hidden = ~batch.past_mask  # (rows, slots)
        for buf in batch.past_k:  # (rows, H, Dh, slots)
            buf[np.broadcast_to(hidden[:, None, None, :], buf.shape)] = 1e30
        for buf in batch.past_v:  # (rows, H, slots, Dh)
            buf[np.broadcast_to(hidden[:, None, :, None], buf.shape)] = 1e30

    staggered(rt, jobs, after_step=fill_hidden)
    for j, s in zip(jobs, solo):
        assert [h.tokens for h in j.result] == [h.tokens for h in s]
        assert [h.score for h in j.result] == [h.score for h in s]


def test_suspended_jobs_resume_where_they_stopped_and_decode_as_alone(setup):
    """Jobs of every beam size leave the batch with their caches (Batch.suspend) at different
    steps, stay out while others decode, and rejoin (Batch.resume), some into a batch of
    another layout: each gives the tokens and scores it gives alone."""
    rt, _, tok = setup
    solo = [decode_all(rt, [job(tok, t, beam_size=1 + i % 3, n_best=2)])[0] for i, t in enumerate(TEXTS)]
    jobs = [job(tok, t, beam_size=1 + i % 3, n_best=2) for i, t in enumerate(TEXTS)]
    batch = Batch(rt)
    batch.add(encode_jobs(rt, jobs))
    out, steps, suspensions = [], 0, 0
    while batch.jobs or out:
        if steps % 3 == 1 and len(batch.jobs) > 1:  # the newest live jobs leave, every third step
            leaving = [j for j in batch.jobs if not j.done][-2:]
            out.extend(batch.suspend(leaving))
            suspensions += len(leaving)
            assert not {j.id for j in leaving} & {j.id for j in batch.jobs}
        elif steps % 3 == 2 and out:  # and come back the next step, all of them
            batch.resume(out)
            out = []
            for j in batch.jobs:  # tokens at their own positions, as alone
                used = batch.past_mask[batch.rows_of[j.id]]
                assert (used == (np.arange(used.shape[1]) < j.step)).all()
        if batch.jobs:
            batch.remove({j.id for j in batch.step()})
        steps += 1
    assert suspensions >= len(TEXTS)
    for j, s in zip(jobs, solo):
        assert [(h.tokens, h.score) for h in j.result] == [(h.tokens, h.score) for h in s]


def test_banned_ids_are_never_output_alone_in_a_batch_or_in_the_resident_batch(setup, tiny_package):
    """A job's banned ids (the server's: language tags, control pieces, placeholders its source
    lacks) are never chosen, by greedy or beam search, on either batch; the other rows of the
    batch decode as they would alone (the ban is each job's own)."""
    rt, _, tok = setup
    resident = Runtime(ModelPackage.load(tiny_package), RuntimeOptions(device="cpu", threads=1, resident="on"))
    assert resident.resident and not rt.resident
    texts = TEXTS[:4]
    free = [hyps[0].tokens for hyps in decode_all(rt, [job(tok, t) for t in texts])]
    # Ban what each text's free output started with (and one of its tags): it must go another way.
    bans = [tuple(sorted({tokens[0], tok.tag_id("en")})) for tokens in free]
    assert all(tokens for tokens in free)
    for runtime in (rt, resident):
        for opts in ({}, {"beam_size": 3, "n_best": 3}):
            alone = [decode_all(runtime, [job(tok, t, banned=b, **opts)])[0] for t, b in zip(texts, bans)]
            for hyps, b in zip(alone, bans):
                assert hyps and all(not set(h.tokens) & set(b) for h in hyps)
            mixed = decode_all(runtime, [job(tok, t, banned=b, **opts) for t, b in zip(texts, bans)] +
                               [job(tok, t, **opts) for t in texts])
            assert [[h.tokens for h in hyps] for hyps in mixed[:4]] == [[h.tokens for h in hyps] for hyps in alone]
            if not opts:
                assert [hyps[0].tokens for hyps in mixed[4:]] == free
                assert all(hyps[0].tokens[0] != tokens[0] for hyps, tokens in zip(alone, free))


def test_beams_share_their_source_until_a_job_of_another_beam_size_joins(setup):
    """A batch of beam-3 jobs holds one copy of each source (rows 3j..3j+2 read source j);
    jobs leave and the last blocks of rows move into their places; a greedy job joining lays
    the sources out once per row. Every text gets the tokens and scores it gets alone."""
    rt, _, tok = setup
    beams = [job(tok, t, beam_size=3, n_best=2) for t in TEXTS[:5]]
    late = job(tok, TEXTS[5])
    solo = [decode_all(rt, [job(tok, t, beam_size=3, n_best=2)])[0] for t in TEXTS[:5]]
    solo.append(decode_all(rt, [job(tok, TEXTS[5])])[0])
    batch = Batch(rt)
    batch.add(encode_jobs(rt, beams))
    assert batch.group == 3 and batch.cross_k[0].shape[0] == -(-batch.capacity[0] // 3)
    first = {j.id: int(batch.rows_of[j.id].min()) for j in beams}
    while len(batch.jobs) == 5:  # until some jobs leave
        batch.remove({j.id for j in batch.step()})
    for j in batch.jobs:  # each job's rows are one aligned block, in any order
        rows = sorted(batch.rows_of[j.id].tolist())
        assert rows[0] % 3 == 0 and rows == list(range(rows[0], rows[0] + 3))
    assert any(int(batch.rows_of[j.id].min()) != first[j.id] for j in batch.jobs)  # a block moved into a hole
    assert batch.group == 3
    batch.add(encode_jobs(rt, [late]))
    assert batch.group == 1 and batch.cross_k[0].shape[0] == batch.capacity[0]
    while batch.jobs:
        batch.remove({j.id for j in batch.step()})
    for j, alone in zip([*beams, late], solo):
        assert [(h.tokens, h.score) for h in j.result] == [(h.tokens, h.score) for h in alone]


def test_attention_rows_follow_the_tokens(setup):
    rt, _, tok = setup
    [[hyp]] = decode_all(rt, [job(tok, TEXTS[1], attention=True)])
    n_src = len(tok.encode_source(TEXTS[1], "de"))
    assert hyp.attention.shape == (len(hyp.tokens), n_src)
    assert np.allclose(hyp.attention.sum(axis=1), 1.0, atol=1e-4)
    [[beam]] = decode_all(rt, [job(tok, TEXTS[1], attention=True, beam_size=3)])
    assert beam.attention.shape == (len(beam.tokens), n_src)


def test_length_limits(setup):
    rt, _, tok = setup
    src = tok.encode_source(TEXTS[0], "de")
    j = Job(src, DecodeOptions(min_len=7), max_len=7, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)
    [[hyp]] = decode_all(rt, [j])
    assert len(hyp.tokens) == 7
    j = Job(src, DecodeOptions(beam_size=2, n_best=2), max_len=3, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)
    [hyps] = decode_all(rt, [j])
    assert 1 <= len(hyps) <= 2 and all(len(h.tokens) <= 3 for h in hyps)


def test_source_width_narrows_when_the_longest_source_leaves(setup):
    rt, _, tok = setup
    short = [job(tok, t) for t in ("Jesus wept.", "Peace be with you.", "He said,")]
    src = tok.encode_source(" ".join(["In the beginning was the Word."] * 6), "de")
    long = Job(src, DecodeOptions(), max_len=2, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)  # leaves after 2 steps
    alone = [decode_all(rt, [job(tok, t)])[0] for t in ("Jesus wept.", "Peace be with you.", "He said,")]
    batch = Batch(rt)
    batch.add(encode_jobs(rt, [*short, long]))
    wide = batch.src_mask.shape[1]
    assert wide == whole_vectors(len(long.src))  # whole 16-column vectors (see VECTOR_COLUMNS)
    while long in batch.jobs:
        batch.remove({j.id for j in batch.step()})
    assert batch.src_mask.shape[1] == whole_vectors(max(len(j.src) for j in short)) < wide
    width = batch.src_mask.shape[1]
    assert all(c.shape[3] == width and c.flags.c_contiguous for c in batch.cross_k)  # (rows, H, Dh, S)
    assert all(c.shape[2] == batch.src_mask.shape[1] and c.flags.c_contiguous for c in batch.cross_v)
    while batch.jobs:
        batch.remove({j.id for j in batch.step()})
    assert [[h.tokens for h in j.result] for j in short] == [[h.tokens for h in a] for a in alone]


def test_steps_read_the_buffers_in_place_and_the_cache_grows_with_the_longest_text(setup, monkeypatch):
    """onnxruntime gets contiguous views of the live rows (no copies per step), and the cache
    holds as many slots as the longest live text needs, not as many as the batch has run."""
    rt, _, tok = setup
    batch = Batch(rt)
    seen = []
    real_step = rt.step

    def spy(input_ids, positions, past_mask, src_mask, cross_k, cross_v, past_k, past_v, vocab=None):
        for given, buf in ((past_mask, batch.past_mask), *zip(past_k, batch.past_k), *zip(cross_k, batch.cross_k)):
            assert given.flags.c_contiguous and np.shares_memory(given, buf)
        seen.append(past_mask.shape[1])
        return real_step(input_ids, positions, past_mask, src_mask, cross_k, cross_v, past_k, past_v, vocab)

    monkeypatch.setattr(rt, "step", spy)
    texts = iter(TEXTS * 20)
    jobs = []
    for _ in range(100):  # 100 steps of overlapping 5-token jobs, two or three alive at a time
        if len(batch) < 3:
            jobs.append(job(tok, next(texts), max_len=5, min_len=5))
            batch.add(encode_jobs(rt, jobs[-1:]))
        batch.remove({j.id for j in batch.step()})
    assert len(seen) == 100 and max(seen) <= Batch.SLOT_CHUNK  # not 100: slots past the live texts' lengths are reused
    while batch.jobs:
        batch.remove({j.id for j in batch.step()})
    assert all(len(j.result[0].tokens) == 5 for j in jobs)
    assert batch.capacity == (0, 0, 0)  # an idle batch holds no memory


def test_newcomers_are_encoded_in_length_groups(setup):
    """Sources of very different lengths are not padded to the longest in one encoder run."""
    rt, _, _ = setup

    def of_length(n: int) -> Job:
        return Job([5] * (n - 1) + [EOS_ID], DecodeOptions(), max_len=4, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)

    jobs = [of_length(n) for n in (40, 10, 10, 12, 10, 40, 10, 40, 10)]
    assert [[len(j.src) for j in g] for g in length_groups(jobs)] == [[10] * 5 + [12], [40] * 3]
    encoded = encode_jobs(rt, jobs)
    assert [e.src_mask.shape for e in encoded] == [(6, 12), (3, 40)]
    assert [c.shape for c in encoded[0].cross_k] == [(6, 4, 16, 12)] * 2  # keys (B, H, Dh, S)
    # 10..15 pad by 15 tokens in one run (within the 16 allowed); a 16 would pad by 21.
    assert [[len(j.src) for j in g] for g in length_groups([of_length(n) for n in range(16, 9, -1)])] == [
        [10, 11, 12, 13, 14, 15], [16]]


def test_spinning_is_a_session_option(tiny_package):
    package = ModelPackage.load(tiny_package)

    def entry(runtime, key):  # not set: onnxruntime's default (spin, between runs too)
        return session_entry(runtime.decoder, key)

    within = Runtime(package, RuntimeOptions(device="cpu", threads=2))  # SPIN: offline decoding spins within runs
    assert (entry(within, "session.force_spinning_stop"), entry(within, "session.intra_op.allow_spinning")) == (
        "1", None)
    never = Runtime(package, RuntimeOptions(device="cpu", threads=2, spin=SERVER_SPIN))
    assert (entry(never, "session.force_spinning_stop"), entry(never, "session.intra_op.allow_spinning")) == (
        None, "0")
    always = Runtime(package, RuntimeOptions(device="cpu", threads=2, spin="always"))
    assert (entry(always, "session.force_spinning_stop"), entry(always, "session.intra_op.allow_spinning")) == (
        None, None)
    with pytest.raises(ValueError, match="spin 'sometimes' must be one of always, run, never"):
        Runtime(package, RuntimeOptions(device="cpu", spin="sometimes"))


# ---------------------------------------------------------------- the first step on unexpanded rows


def outcome(results: list[list[Hypothesis]]) -> list[list[tuple]]:
    """Everything a result holds, compared exactly: tokens, score, why it stopped, attention's bits."""
    return [[(h.tokens, h.score, h.stop_reason, None if h.attention is None else h.attention.tobytes())
             for h in hyps] for hyps in results]


def fresh(j: Job) -> Job:
    """A new job like ``j``, not started."""
    return Job(j.src, j.options, j.max_len, j.bos, j.eos, j.pad, j.prefix, j.banned)


def every_row(batch: Batch) -> Batch:
    """``batch`` with the shortcut off: the decoder runs on every row at every step."""
    batch._first_rows = lambda: None
    return batch


def staggered(rt: Runtime, jobs: list[Job], after_step=None) -> list[list[Hypothesis]]:
    """Continuous batching: two jobs join before every other step, into a running batch;
    ``after_step(batch)``, if given, runs after every step."""
    batch, pending, steps = Batch(rt), list(jobs), 0
    while pending or batch.jobs:
        if pending and steps % 2 == 0:
            batch.add(encode_jobs(rt, pending[:2]))
            pending = pending[2:]
        batch.remove({j.id for j in batch.step()})
        steps += 1
        if after_step is not None:
            after_step(batch)
    return [j.result or [] for j in jobs]


def decodes(rt: Runtime, jobs: list[Job], monkeypatch, shortcut: bool) -> dict[str, list[list[tuple]]]:
    """The outcomes of ``jobs`` (started afresh each time) in one batch, each alone, and joining a
    running batch, with the shortcut or with every row at every step."""
    with monkeypatch.context() as m:
        if not shortcut:
            m.setattr(Batch, "_first_rows", lambda self: None)
        return {"batch": outcome(decode_all(rt, [fresh(j) for j in jobs])),
                "alone": outcome([decode_all(rt, [fresh(j)])[0] for j in jobs]),
                "joining": outcome(staggered(rt, [fresh(j) for j in jobs]))}


def counting_rows(rt: Runtime, monkeypatch) -> list[int]:
    """The rows of every step the real runtime runs from now on (the model itself untouched)."""
    runs: list[int] = []
    real_step = rt.step

    def counting(input_ids, *args):
        runs.append(input_ids.shape[0])
        return real_step(input_ids, *args)

    monkeypatch.setattr(rt, "step", counting)
    return runs


@pytest.fixture(scope="module")
def int8(tiny_package) -> Runtime:
    return Runtime(ModelPackage.load(tiny_package), RuntimeOptions(device="cpu", threads=1, variant="int8"))


def test_unexpanded_beam_jobs_run_the_decoder_on_one_row_each(setup, monkeypatch):
    """CTranslate2's "first step on unexpanded rows": while every job of a batch of beam-k jobs
    is at its first step or its forced prefix (its k beams one hypothesis), the step graph gets one
    row per job, and the batch is left as if every row had run (the same bits in every cache,
    mask and job, step by step); once a search step has expanded the beams, or a greedy job shares
    the batch, every row runs. Jobs joining at other positions are handled either way."""
    rt, _, tok = setup
    prefix = tuple(tok.encode("Und er")[:2])
    runs = counting_rows(rt, monkeypatch)

    def lockstep(waves: list[list[Job]]) -> list[int]:
        """Each wave joins before the next step, in a batch with the shortcut and in one without;
        after every step the two hold the same bits. The row counts of the shortcut's steps."""
        twins = [[fresh(j) for j in w] for w in waves]
        on, off, seen = Batch(rt), every_row(Batch(rt)), []
        for step in itertools.count():
            if step < len(waves):
                on.add(encode_jobs(rt, waves[step]))
                off.add(encode_jobs(rt, twins[step]))
            if not on.jobs:
                break
            runs.clear()
            done_on, done_off = on.step(), off.step()
            seen.append(runs[0])
            assert [j.step for j in done_on] == [j.step for j in done_off]
            assert [on.rows_of[j.id].tolist() for j in on.jobs] == [off.rows_of[j.id].tolist() for j in off.jobs]
            n = on.n
            for mine, theirs in zip((*on.past_k, *on.past_v, on.past_mask), (*off.past_k, *off.past_v, off.past_mask)):
                assert np.array_equal(mine[:n], theirs[:n]), step
            for a, b in zip(on.jobs, off.jobs):
                assert (a.step, a.beams, a.scores.tobytes(), a.last.tolist()) == (
                    b.step, b.beams, b.scores.tobytes(), b.last.tolist())
            on.remove({j.id for j in done_on})
            off.remove({j.id for j in done_off})
        assert outcome([j.result for w in waves for j in w]) == outcome([j.result for w in twins for j in w])
        return seen

    def beams(texts, k=4, **opts) -> list[Job]:
        return [job(tok, t, beam_size=k, n_best=2, **opts) for t in texts]

    # Three beam-4 jobs: one row each at the first step, then all 12.
    assert lockstep([beams(TEXTS[1:4])])[:2] == [3, 12]
    # With a two-token prefix: the two forced steps and the first search step.
    assert lockstep([beams(TEXTS[1:4], prefix=prefix)])[:4] == [3, 3, 3, 12]
    assert lockstep([beams(TEXTS[1:2], k=3)])[:2] == [1, 3]  # alone
    # A greedy job in the batch (one source per row): every row, always.
    assert lockstep([[job(tok, TEXTS[1]), *beams(TEXTS[2:3])]])[:2] == [5, 5]
    # Jobs joining before the second step: the first two are expanded by then, so every row runs ...
    assert lockstep([beams(TEXTS[1:3]), beams(TEXTS[3:5])])[:2] == [2, 16]
    # ... unless they are still forced: then the newcomers (at position 0, the others at 1) run
    # one row each with them, until the first two take their first search step.
    assert lockstep([beams(TEXTS[1:3], prefix=prefix), beams(TEXTS[3:5], prefix=prefix)])[:4] == [2, 4, 4, 16]


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_beam_search_decodes_the_same_whether_unexpanded_rows_run_once_or_every_row_runs(setup, int8, variant,
                                                                                         monkeypatch):
    """Tokens, scores, stop reasons and attention of beams 2 to 4, with the shortcut and without
    (every row at every step), in one batch, alone and joining a running batch: with a forced
    prefix, min_len, banned ids, attention, and greedy jobs in the batch. Either way a text gets
    the same alone, batched and joining."""
    fp32, _, tok = setup
    rt = fp32 if variant == "fp32" else int8
    prefix = tuple(tok.encode("Und er")[:2])
    texts = TEXTS[:6]
    banned = tuple(sorted({tok.encode(t)[0] for t in ("Im Anfang", "Jesus", "Er")}))
    for k in (2, 3, 4):
        cases: dict[str, list[Job]] = {
            "plain": [job(tok, t, beam_size=k, n_best=k) for t in texts],
            "prefix": [job(tok, t, beam_size=k, n_best=2, prefix=prefix) for t in texts],
            "min_len": [job(tok, t, beam_size=k, min_len=6, max_len=9) for t in texts],
            "banned": [job(tok, t, beam_size=k, banned=banned) for t in texts],
            "attention": [job(tok, t, beam_size=k, n_best=2, attention=True, prefix=prefix) for t in texts],
            "greedy too": [job(tok, t, beam_size=1 if i % 2 else k, prefix=prefix) for i, t in enumerate(texts)],
        }
        for name, jobs in cases.items():
            on = decodes(rt, jobs, monkeypatch, shortcut=True)
            assert on == decodes(rt, jobs, monkeypatch, shortcut=False), (k, name)
            assert on["batch"] == on["alone"] == on["joining"], (k, name)


def test_with_a_shortlist_unexpanded_rows_run_once_and_beams_decode_the_same(setup, tiny_package, tiny_checkpoint,
                                                                           tmp_path, monkeypatch):
    """The shortcut with a vocabulary shortlist (each row scores its own job's pieces, over the
    batch's union): one row per job at the first step, and the same results as every row, in
    one batch, alone and joining (the union differs between those, so only the tokens agree
    across them, as without the shortcut)."""
    _, _, tok = setup
    shutil.copytree(tiny_package, tmp_path / "tiny")
    package = add_to_package(tmp_path / "tiny", learn(*training_examples(tiny_checkpoint), frequent=16, per_source=4),
                             {"frequent": 16, "per_source": 4})
    rt = Runtime(package, RuntimeOptions(device="cpu", threads=1, variant="int8"))
    assert rt.shortlist is not None
    runs = counting_rows(rt, monkeypatch)
    for k in (2, 4):
        jobs = [job(tok, t, beam_size=k, n_best=2) for t in TEXTS]
        runs.clear()
        on = decodes(rt, jobs, monkeypatch, shortcut=True)
        assert runs[:2] == [len(TEXTS), k * len(TEXTS)]  # the first batch's first two steps
        assert on == decodes(rt, jobs, monkeypatch, shortcut=False), k
        tokens = {mode: [[h[0] for h in hyps] for hyps in got] for mode, got in on.items()}
        assert tokens["batch"] == tokens["alone"] == tokens["joining"], k
