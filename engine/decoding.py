"""The whole decoding loop: greedy and beam search over the decoder-step graph, batched
continuously.

A ``Job`` is one source text; it owns ``beam_size`` rows of the running ``Batch`` (one
for greedy). At every step the batch feeds each row's last token at its own position;
each row keeps its keys and values at its own positions, masked past its length, so jobs at
different lengths share one step. Jobs join between steps (after one encoder run for all newcomers)
and leave when finished, cancelled or expired. The cache is a preallocated buffer the
step graph only reads; the loop writes each step's new keys and values into it in place.

Beams of one job share their source's cross-attention keys/values: when every job in the
batch has the same beam size k, the buffers hold one copy per job and its k rows read it
(the step graph broadcasts a source over its group of rows; engine/contract.py), so beam
search reads a source once a step instead of k times; a batch that mixes beam sizes holds
one copy per row. Either way every row computes the same values. When beams are re-ranked,
each new beam moves into its parent's row; only a parent's second child copies its
self-attention cache. Until a beam job's first search step its beams are one hypothesis,
so while every job of a batch of one beam size is at that point, the decoder runs on one row per job
(``Batch.step``). The search itself mirrors ``training/decode.py`` step for step (the
reference the tests hold it to), so a text decoded in any batch gives the tokens it gets alone.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from engine import contract
from engine.defaults import LENGTH_PENALTY, length_penalty
from engine.runtime import Runtime

NEG_INF = -np.inf


# The attention's softmax and weighted sums run over cache slots and source positions in
# vectors of up to 16 floats, and a last, partial vector takes other instructions (on this
# CPU a source of 43 positions padded to 44-47 gave other bits than unpadded). Buffers hold
# a whole number of 16-column vectors, so every real column is computed the same way
# whatever the width around it, alone or beside longer texts.
VECTOR_COLUMNS = 16


def whole_vectors(columns: int) -> int:
    """``columns`` rounded up to a multiple of VECTOR_COLUMNS."""
    return -(-columns // VECTOR_COLUMNS) * VECTOR_COLUMNS


@dataclass(frozen=True)
class DecodeOptions:
    beam_size: int = 1
    n_best: int = 1
    alpha: float = LENGTH_PENALTY  # GNMT length penalty ((5 + |Y|) / 6) ^ alpha, beam search only
    min_len: int = 0  # (the output-length bound is each Job's max_len)
    attention: bool = False


class StopReason(enum.Enum):
    """Why a hypothesis ended (nmt.v1.StopReason on the wire)."""

    END_OF_SENTENCE = enum.auto()  # the model chose the end-of-sentence token
    LENGTH_LIMIT = enum.auto()  # the output-length limit: the text may be cut short


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # without bos and eos
    score: float
    attention: np.ndarray | None = None  # (len(tokens), source length) when asked for
    stop_reason: StopReason = StopReason.END_OF_SENTENCE


# best_candidates: one candidate in this many is sampled to bound the selection from below.
SAMPLE_STRIDE = 32


def best_candidates(cand: np.ndarray, m: int) -> np.ndarray:
    """Flat indices of the ``m`` best of ``cand``, best first; ties go to the lower index,
    as a stable sort would.

    The m-th best of any subset is at most the m-th best of all, so every candidate at
    least as good as the m-th best of a strided sample is kept, and only those few (about
    ``SAMPLE_STRIDE`` x m) are ranked. With 4 beams over an 8,000-word vocabulary that is
    ~17 us per job, ~22 with a stride of 16 (the sample's partition costs more than the
    extra candidates save), ~75 for a partition of all 32,000 (one-off timings on peaked and
    flat rows).
    """
    if cand.size > SAMPLE_STRIDE * m:
        sample = cand[::SAMPLE_STRIDE]
        floor = np.partition(sample, sample.size - m)[sample.size - m]
        top = np.flatnonzero(cand >= floor)
    else:
        top = np.arange(cand.size)
    if top.size > m:  # keep every candidate tied with the m-th best: the sort breaks the ties
        values = cand[top]
        top = top[values >= np.partition(values, values.size - m)[values.size - m]]
    return top[np.lexsort((top, -cand[top]))][:m]


_ids = itertools.count()


@dataclass(eq=False)
class Job:
    """One source being decoded; ``result`` is set when it is done."""

    src: list[int]  # tag + pieces + eos
    options: DecodeOptions
    max_len: int
    bos: int  # the decoder's first input
    eos: int
    pad: int
    # Tokens fed after bos before the search chooses any (NLLB's target-language code): forced,
    # scored 0, not part of the output, not counted against max_len or min_len.
    prefix: tuple[int, ...] = ()
    # Ids the search never outputs (pad never is either): the server bans every id that is not
    # text but eos and the source's own placeholders (language tags, control pieces, made-up
    # placeholders), so none of them can reach a translation. Each job's own, so batch-invariant.
    banned: tuple[int, ...] = ()
    id: int = field(default_factory=lambda: next(_ids))
    step: int = 0  # tokens fed so far (the position of the next one)
    done: bool = False
    result: list[Hypothesis] | None = None

    def __post_init__(self) -> None:
        k = self.k
        self.beams: list[list[int]] = [[] for _ in range(k)]
        self.attn: list[list[np.ndarray]] = [[] for _ in range(k)]
        self.scores = np.full(k, NEG_INF, dtype=np.float32)
        self.scores[0] = 0.0  # beams start identical: only the first expands
        self.last = np.full(k, self.bos, dtype=np.int64)
        self.finished: list[Hypothesis] = []

    @property
    def k(self) -> int:
        return self.options.beam_size

    @property
    def forcing(self) -> bool:
        """The step's output is the prefix's next token, whatever the model says."""
        return self.step < len(self.prefix)

    @property
    def unexpanded(self) -> bool:
        """A beam job whose beams are still one hypothesis: no search step yet (bos, then the
        forced prefix), scores [0, -inf, ...], every row fed the same tokens at the same
        positions, so every row's step computes what its first row does (``Batch.step``)."""
        return self.k > 1 and self.step <= len(self.prefix)

    @property
    def no_eos(self) -> bool:
        """eos is banned at this step (before ``min_len`` output tokens)."""
        return self.step < len(self.prefix) + self.options.min_len

    def _force(self) -> np.ndarray:
        """A prefix step: every beam takes the forced token and stays in its row."""
        self.last[:] = self.prefix[self.step]
        self.step += 1
        return np.arange(self.k)

    def advance(self, logp: np.ndarray, attention: np.ndarray | None, ids: np.ndarray | None = None) -> np.ndarray:
        """Beam search's step: consume this step's log-probabilities (k, V) and return each
        new beam's parent (the index of the beam it extends; dead beams: 0). With ``ids`` (a
        shortlist), column j of ``logp`` is token ids[j]."""
        if self.forcing:
            return self._force()
        vocab = logp.shape[1]
        cand = (self.scores[:, None] + logp).reshape(-1)
        top = best_candidates(cand, 2 * self.k)
        tokens = top % vocab if ids is None else ids[top % vocab]
        parents = self._beam(top // vocab, tokens, cand[top], attention)
        self._next_step()
        return parents

    def advance_top(self, values: np.ndarray, ids: np.ndarray, attention: np.ndarray | None) -> np.ndarray:
        """``advance`` from each beam's best candidates instead of all log-probabilities:
        ``values`` (k, K) running score + log-probability, best first, and their token ``ids``,
        K >= 2k (or the vocabulary). The 2k best of the k x K are the 2k best of all k x V;
        ties go to the lower (beam, token), as ``best_candidates`` breaks them."""
        if self.forcing:
            return self._force()
        rows = np.repeat(np.arange(self.k), values.shape[1])
        v, t = values.reshape(-1), ids.reshape(-1)
        top = np.lexsort((t, rows, -v))[: 2 * self.k]
        parents = self._beam(rows[top], t[top], v[top], attention)
        self._next_step()
        return parents

    def advance_greedy(self, token: int, logp: np.float32, attention: np.ndarray | None) -> None:
        """Greedy search's step, given the row's best token and its log-probability (the
        batch takes the argmax of all greedy rows at once). The batch also bans eos before
        ``min_len``, for greedy and beam rows alike."""
        if self.forcing:
            self._force()
            return
        self.scores[0] += logp
        if token == self.eos:
            self._finish([Hypothesis(self.beams[0], float(self.scores[0]), self._attn(0))])
        else:
            self.beams[0].append(token)
            if attention is not None:
                self.attn[0].append(attention[0])
            self.last[0] = token
        self._next_step()

    def _next_step(self) -> None:
        self.step += 1
        if not self.done and self.step - len(self.prefix) >= self.max_len:
            self._finish_live()

    def _beam(self, cand_rows: np.ndarray, cand_tokens: np.ndarray, cand_scores: np.ndarray,
              attention: np.ndarray | None) -> np.ndarray:
        """Take the 2k best candidates, best first (the beam each extends, its token, its
        score): finished ones are kept, the k best live ones become the new beams."""
        k = self.k
        alpha = self.options.alpha
        rows, tokens, scores = [], [], []
        for rank, (row, token, score) in enumerate(zip(cand_rows.tolist(), cand_tokens.tolist(),
                                                       cand_scores.tolist())):
            if len(rows) == k or score == NEG_INF:
                break
            if token == self.eos:
                # Finished only among the k best (fairseq's and Transformers' rule): a
                # hypothesis the beam would not have kept does not end the search.
                if rank < k and len(self.finished) < k:
                    hyp = self.beams[row]
                    self.finished.append(Hypothesis(hyp, score / length_penalty(len(hyp) + 1, alpha),
                                                    self._attn(row)))
                continue
            rows.append(row)
            tokens.append(token)
            scores.append(score)
        while len(rows) < k:  # dead beams keep the row count fixed
            rows.append(0)
            tokens.append(self.pad)
            scores.append(NEG_INF)
        self.beams = [[*self.beams[r], t] if s > NEG_INF else [] for r, t, s in zip(rows, tokens, scores)]
        if attention is not None:
            self.attn = [[*self.attn[r], attention[r]] if s > NEG_INF else [] for r, s in zip(rows, scores)]
        self.scores = np.array(scores, dtype=np.float32)
        self.last = np.array(tokens, dtype=np.int64)
        if len(self.finished) >= k:
            self._finish(self.finished)
        return np.array(rows)

    def _attn(self, row: int) -> np.ndarray | None:
        if not self.options.attention:
            return None
        n = len(self.src)
        return np.stack(self.attn[row]) if self.attn[row] else np.zeros((0, n), dtype=np.float32)

    def _finish_live(self) -> None:
        """At the length limit: live hypotheses are finished as they stand."""
        cut = StopReason.LENGTH_LIMIT
        if self.k == 1:
            self._finish([Hypothesis(self.beams[0], float(self.scores[0]), self._attn(0), cut)])
            return
        for row in range(self.k):
            if self.scores[row] > NEG_INF:
                hyp = self.beams[row]
                self.finished.append(Hypothesis(hyp, float(self.scores[row]) / length_penalty(len(hyp),
                                                                                              self.options.alpha),
                                                self._attn(row), cut))
        self._finish(self.finished)

    def _finish(self, hyps: list[Hypothesis]) -> None:
        self.done = True
        ranked = sorted(hyps, key=lambda h: h.score, reverse=True) if self.k > 1 else hyps
        self.result = ranked[: self.options.n_best]


def beam_rows(rows: np.ndarray, parents: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, list[int], list[int]]:
    """Batch rows for a job's re-ranked beams, given the rows of its beams (beam order), each
    new beam's parent beam and which new beams are live.

    The cache of a row is what its beam has seen, so a beam may simply move into its
    parent's row: the first live beam to claim a parent takes that row as it is. Only a
    second child of one parent needs a copy, into a row no beam claimed; dead beams take
    what is left, uncopied (their scores are -inf, nothing reads their output). Returns the
    new rows (new beam order) and the copies to make, destination and source rows.
    """
    k = len(rows)
    new = [-1] * k
    claimed = [False] * k
    for i in range(k):
        p = int(parents[i])
        if live[i] and not claimed[p]:
            claimed[p] = True
            new[i] = int(rows[p])
    spare = [int(rows[j]) for j in range(k) if not claimed[j]]
    to, of = [], []
    for i in range(k):
        if new[i] < 0:
            new[i] = spare.pop(0)
            if live[i]:
                to.append(new[i])
                of.append(int(rows[int(parents[i])]))
    return np.array(new), to, of


def by_position(keys: Sequence[np.ndarray], values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Views (rows, H, positions, Dh) of key buffers (stored transposed) and value buffers,
    so that one piece of code moves columns of both."""
    return [k.swapaxes(2, 3) for k in keys] + list(values)


class Batch:
    """The running batch: the rows of every active job over one preallocated cache.

    Per decoder layer the batch owns key and value buffers over cache slots and the sources'
    cross-attention keys and values over source positions (keys transposed, (rows, H, Dh,
    positions), values (rows, H, positions, Dh); engine/contract.py), with masks over slots
    and source positions (per row). The sources' buffers hold one source per ``group`` rows:
    the beam size when every job has the same one (a job's rows are then one aligned block,
    and stay one, as rows move in blocks), else 1, until the batch is empty again. Rows
    ``0 .. n-1`` are in use, densely: a leaving job's rows are
    refilled with the last rows (copying a few rows, never the batch), so each step hands
    onnxruntime contiguous views of exactly the live rows and nothing is copied per step.
    The graph reads cache slots as a set (positions are inputs), but this batch writes each
    row's token at position ``p`` into slot ``p`` of its own row, so a row's cache is laid
    out exactly as it would be if its job were decoded alone, whenever it joined. That keeps
    the attention's sums over slots in the same order as alone: with one shared slot per
    step, a job that joined a running batch had its keys at other columns, the kernels
    grouped the terms differently, and int8 turned those last-bit differences into another
    token on about 1 text in 100 (``python -m bench.studies.variant_ab``, continuous batching). The buffers grow
    with the longest live target, in chunks of ``SLOT_CHUNK``, and narrow when it leaves.
    """

    ROW_CHUNK = 8
    SLOT_CHUNK = 16
    NARROW_MIN = 8  # columns: never rebuild the buffers to save fewer

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.jobs: list[Job] = []
        self.rows_of: dict[int, np.ndarray] = {}  # job id -> its rows (beam order)
        self.n = 0  # rows in use: 0 .. n-1
        self.group = 1  # rows per source in the cross-attention buffers: row r reads source r // group
        self._alloc(0, 0, 0)
        # With a shortlist (runtime.shortlist): each job's allowed target ids, their union (the
        # columns a step scores, sorted) and which of them each row may use (its own job's).
        self.allowed_of: dict[int, np.ndarray] = {}
        self.vocab: np.ndarray | None = None
        self.vocab_mask = np.zeros((0, 0), dtype=bool)  # (rows capacity, union size)
        self._vocab_jobs = 0

    def _refresh_vocab(self) -> None:
        """The union of the live jobs' shortlists and every row's mask over it. A row's mask is
        its own job's list, so its scores do not depend on which other jobs share the batch;
        the union only decides which columns a step computes. Rebuilt when jobs join with
        pieces it lacks, and when those that left could have shrunk it by half (the masks'
        rows otherwise move with the rows, as the caches do: cheaper than a rebuild per leaver)."""
        if self.rt.shortlist is None or not self.jobs:
            self.vocab, self.vocab_mask, self._vocab_jobs = None, np.zeros((0, 0), dtype=bool), 0
            return
        self.vocab = np.unique(np.concatenate([self.allowed_of[j.id] for j in self.jobs])).astype(np.int64)
        self.vocab_mask = np.zeros((self.capacity[0], self.vocab.size), dtype=bool)
        self._mask_rows(self.jobs)
        self._vocab_jobs = len(self.jobs)  # jobs the union was built for

    def _mask_rows(self, jobs: list[Job]) -> None:
        """Each job's rows of the mask: its own pieces, nothing else."""
        for j in jobs:
            rows = self.rows_of[j.id]
            self.vocab_mask[rows] = False
            self.vocab_mask[rows[:, None], np.searchsorted(self.vocab, self.allowed_of[j.id])[None, :]] = True

    def _join_vocab(self, jobs: list[Job]) -> None:
        """Newcomers' rows in the masks; the union rebuilt only when it lacks some of their pieces."""
        if self.rt.shortlist is None:
            return
        if self.vocab is None or self.vocab_mask.shape[0] < self.capacity[0] or any(
                not np.isin(self.allowed_of[j.id], self.vocab, assume_unique=True).all() for j in jobs):
            self._refresh_vocab()
            return
        self._mask_rows(jobs)
        self._vocab_jobs += len(jobs)

    def _allowed(self, job: Job) -> np.ndarray:
        """A job's shortlist: what the runtime allows its source (every piece for a source without
        a language tag; eos is always in), never pad (no token)."""
        got = self.rt.allowed(job.src)
        ids = np.arange(self.rt.package.dims.vocab_size) if got is None else got
        return ids[ids != job.pad]

    def _alloc(self, rows: int, slots: int, width: int) -> None:
        self._new_cache(rows, slots)
        self._new_cross(rows, width)

    def _new_cache(self, rows: int, slots: int) -> None:
        slots = whole_vectors(slots)
        layers = range(self.rt.n_layers)
        self.past_k = [self.rt.cache(rows, slots, keys=True) for _ in layers]
        self.past_v = [self.rt.cache(rows, slots) for _ in layers]
        self.past_mask = np.zeros((rows, slots), dtype=bool)

    def _new_cross(self, rows: int, width: int) -> None:
        width = whole_vectors(width)
        layers = range(self.rt.n_layers)
        sources = -(-rows // self.group)
        self.cross_k = [self.rt.cache(sources, width, keys=True) for _ in layers]
        self.cross_v = [self.rt.cache(sources, width) for _ in layers]
        self.src_mask = np.zeros((rows, width), dtype=bool)

    def _cache_columns(self) -> list[np.ndarray]:
        """Every past key and value buffer as a (rows, H, slots, Dh) view."""
        return by_position(self.past_k, self.past_v)

    def _cross_columns(self) -> list[np.ndarray]:
        """Every cross-attention key and value buffer as a (sources, H, S, Dh) view."""
        return by_position(self.cross_k, self.cross_v)

    @property
    def capacity(self) -> tuple[int, int, int]:
        """(rows, cache slots, source width) the buffers hold."""
        return self.src_mask.shape[0], self.past_mask.shape[1], self.src_mask.shape[1]

    def __len__(self) -> int:
        return len(self.jobs)

    # The cache and the cross-attention buffers are resized apart: a cache that needs more
    # slots leaves the sources' keys and values where they are (copying them too made a
    # batch's first growth, 32 rows x 16 -> 32 slots, 5-9 ms instead of about 3; about 0.7
    # once freed memory is reused, engine/memory.py).
    def _resize_cache(self, rows: int, slots: int) -> None:
        """New cache buffers of ``rows`` x ``slots``, the live rows copied over (their first
        ``slots``: a row's tokens sit at their positions, so its used slots lead)."""
        n, old, old_mask = self.n, self._cache_columns(), self.past_mask
        kept = min(slots, old_mask.shape[1])
        self._new_cache(rows, slots)
        for new, buf in zip(self._cache_columns(), old):  # (rows, H, slots, Dh)
            new[:n, :, :kept] = buf[:n, :, :kept]
        self.past_mask[:n, :kept] = old_mask[:n, :kept]

    def _resize_cross(self, rows: int, width: int) -> None:
        """New cross-attention buffers of ``rows`` x ``width`` source positions, the live
        rows copied over (their first ``width`` positions)."""
        n, old, old_src = self.n, self._cross_columns(), self.src_mask
        w, used = min(width, old_src.shape[1]), self.n // self.group
        self._new_cross(rows, width)
        for new, buf in zip(self._cross_columns(), old):  # (sources, H, S, Dh)
            new[:used, :, :w] = buf[:used, :, :w]
        self.src_mask[:n, :w] = old_src[:n, :w]

    def _set_group(self, ks: set[int]) -> None:
        """The sources' layout for jobs of beam sizes ``ks`` joining: grouped by the beam size
        when the batch is empty (it then holds no buffers) and they share one; one source per
        row (each source repeated) when a job of another size joins a grouped batch."""
        if self.n == 0:
            self.group = ks.pop() if len(ks) == 1 else 1
        elif self.group > 1 and ks != {self.group}:
            g, rows = self.group, self.capacity[0]
            self.cross_k, self.cross_v = ([np.repeat(c, g, axis=0)[:rows] for c in bufs]
                                          for bufs in (self.cross_k, self.cross_v))
            self.group = 1

    def _sources(self, rows: np.ndarray) -> np.ndarray:
        """The sources that ``rows`` read, for rows that come in whole blocks of ``group`` (a
        job's rows, or several jobs'), in order."""
        return rows[::self.group] // self.group

    def add(self, groups: list[Encoded]) -> None:
        """Jobs join with one encoder output row each (from one or more encoder runs): its
        source's keys/values, once per job or once per row (``group``). The buffers grow at
        most once per call."""
        self._set_group({j.k for g in groups for j in g.jobs})
        needed = self.n + sum(j.k for g in groups for j in g.jobs)
        widest = max(g.src_mask.shape[1] for g in groups)
        capacity, slots, width = self.capacity
        grow = needed > capacity
        if grow:
            capacity = max(needed, 2 * capacity, self.ROW_CHUNK)
            self._resize_cache(capacity, slots)
        if grow or widest > width:
            self._resize_cross(capacity, max(width, widest))
        for jobs, cross_k, cross_v, src_mask, enc_rows in groups:
            s, n = src_mask.shape[1], self.n
            ks = [j.k for j in jobs]
            rows = slice(n, n + sum(ks))  # the newcomers' rows, beams of one job next to each other
            per_job = np.repeat(np.arange(len(jobs)), ks)
            source = enc_rows[per_job[::self.group]]  # each new source's row of the encoder output
            first = n // self.group
            for buf, enc in zip(self._cross_columns(), by_position(cross_k, cross_v)):  # (sources, H, S, Dh)
                buf[first:first + len(source), :, :s] = enc[source]
                buf[first:first + len(source), :, s:] = 0
            self.src_mask[rows] = False
            self.src_mask[rows, :s] = src_mask[per_job]
            self.past_mask[rows] = False  # the new rows see none of the cache before them
            for job, first in zip(jobs, np.cumsum([n, *ks[:-1]])):
                self.rows_of[job.id] = np.arange(first, first + job.k)
                if self.rt.shortlist is not None:
                    self.allowed_of[job.id] = self._allowed(job)
            self.n += sum(ks)
            self.jobs.extend(jobs)
        self._join_vocab([j for g in groups for j in g.jobs])

    def remove(self, leaving: set[int]) -> None:
        """Drop the jobs whose ids are in ``leaving``; the last rows fill their places."""
        if not leaving:
            return
        self.jobs = [j for j in self.jobs if j.id not in leaving]
        for jid in leaving:
            self.allowed_of.pop(jid, None)
        holes = np.sort(np.concatenate([self.rows_of.pop(jid) for jid in leaving]))
        n = self.n - len(holes)
        targets = holes[holes < n]  # rows below the new end that must be refilled
        left = set(holes.tolist())
        sources = np.array([r for r in range(n, self.n) if r not in left], dtype=np.int64)  # live rows past the new end
        if len(targets):
            moving = (*self.past_k, *self.past_v, self.past_mask, self.src_mask)
            for buf in (*moving, *((self.vocab_mask,) if self.vocab is not None else ())):
                buf[targets] = buf[sources]
            into, out_of = self._sources(targets), self._sources(sources)  # holes and movers are whole blocks
            for buf in (*self.cross_k, *self.cross_v):
                buf[into] = buf[out_of]
            moved = dict(zip(sources.tolist(), targets.tolist()))
            for j in self.jobs:
                rows = self.rows_of[j.id]
                if rows.max() >= n:
                    self.rows_of[j.id] = np.array([moved.get(int(r), int(r)) for r in rows])
        self.n = n
        if not self.jobs or (self.vocab is not None and 2 * len(self.jobs) <= self._vocab_jobs):
            self._refresh_vocab()
        if not self.jobs:
            self._alloc(0, 0, 0)  # idle: give the memory back
            return
        rows, slots, old_width = self.capacity
        # Every step reads all slots and the full source width of every row; when the
        # longest targets or sources have left, rebuild narrower buffers (one copy of the
        # live rows) once the columns read for nothing are a quarter of those read. Sizes
        # are compared as allocated (whole vectors), so a rebuild always narrows.
        narrower = whole_vectors(max(j.step for j in self.jobs) + self.SLOT_CHUNK)  # slots used: the longest target
        if slots - narrower >= max(self.NARROW_MIN, slots // 4):
            self._resize_cache(rows, narrower)
        width = whole_vectors(max(len(j.src) for j in self.jobs))
        if old_width - width >= max(self.NARROW_MIN, old_width // 4):
            self._resize_cross(rows, width)

    def _fit_slots(self, needed: int) -> None:
        """Room for ``needed`` slots per row; the buffers grow by half, at least a chunk."""
        rows, slots, _ = self.capacity
        if needed > slots:
            self._resize_cache(rows, max(needed, slots + max(self.SLOT_CHUNK, slots // 2)))

    def _first_rows(self) -> np.ndarray | None:
        """The rows a step runs the decoder on when every job is an unexpanded beam job of a
        grouped batch: the first row of each aligned block of ``group`` rows, one per job and in
        source order (row r reads source r // group; an unexpanded job's rows are all alike);
        None otherwise (every row runs)."""
        if self.group == 1 or not all(j.unexpanded for j in self.jobs):
            return None
        return np.arange(0, self.n, self.group)

    def step(self) -> list[Job]:
        """One decoder step for every row; returns the jobs that finished."""
        n, used = self.n, self.n // self.group  # rows, sources
        input_ids, positions, shared = row_inputs(self.jobs, self.rows_of, n)
        # Each row writes its new token at its own position (see the class): rows that started
        # together write the same slot, a plain slice, about 2.5x faster than the scatter over
        # (row, slot) pairs that rows at different positions need.
        rows, at = (slice(0, n), shared) if shared is not None else (np.arange(n), positions[:, 0])
        self._fit_slots((shared if shared is not None else int(at.max())) + 1)
        ids = self.vocab  # the columns' tokens with a shortlist; None: column j is token j
        # CTranslate2's "first step on unexpanded rows": while a beam job's k beams are one
        # hypothesis (its first step and its forced prefix), its k rows compute the same bits (a
        # row's outputs depend on its own inputs only; int8 quantizes per row, export/quantize.py).
        # So when every job of a grouped batch is unexpanded, the decoder runs on one row per job
        # with the source buffers as they are, and its outputs are repeated over the job's rows:
        # the batch is left as if every row had run. Otherwise (a job past its first search step,
        # greedy or mixed beam sizes: group 1) every row runs.
        run = self._first_rows()
        at_run = slice(0, n) if run is None else run
        log_probs, new_k, new_v, attention = self.rt.step(
            input_ids[at_run], positions[at_run], self.past_mask[at_run], self.src_mask[at_run],
            [c[:used] for c in self.cross_k], [c[:used] for c in self.cross_v], [c[at_run] for c in self.past_k],
            [c[at_run] for c in self.past_v], None if ids is None else (ids, self.vocab_mask[at_run]))
        if run is not None:  # one row per job -> its ``group`` rows (one block: row r is job r // group's)
            g = self.group
            log_probs, attention = np.repeat(log_probs, g, axis=0), np.repeat(attention, g, axis=0)
            new_k, new_v = [np.repeat(x, g, axis=0) for x in new_k], [np.repeat(x, g, axis=0) for x in new_v]
        for buf, new in zip(self.past_k, new_k):  # (rows, H, Dh, slots) <- (n, H, Dh, 1)
            buf[rows, :, :, at] = new[:, :, :, 0]
        for buf, new in zip(self.past_v, new_v):  # (rows, H, slots, Dh) <- (n, H, 1, Dh)
            buf[rows, :, at] = new[:, :, 0]
        self.past_mask[rows, at] = True
        logp = log_probs.astype(np.float32, copy=False)
        eos = self.jobs[0].eos
        if ids is None:
            logp[:, self.jobs[0].pad] = NEG_INF  # pad is no token (training never asks for it): never output
        else:  # the shortlist holds no pad, and eos always
            eos = int(np.searchsorted(ids, eos))
        ban(logp, self.jobs, self.rows_of, ids)
        early = [self.rows_of[j.id] for j in self.jobs if j.no_eos]
        if early:  # no eos before a job's min_len
            logp[np.concatenate(early), eos] = NEG_INF
        if any(j.k == 1 for j in self.jobs):  # one argmax for every greedy row
            best = logp.argmax(axis=1)
            best_logp = logp[np.arange(n), best]
            if ids is not None:
                best = ids[best]
        finished, copy_to, copy_from = advance_jobs(
            self.jobs, self.rows_of, attention, lambda row: (int(best[row]), best_logp[row]),
            lambda job, rows, attn: job.advance(logp[rows], attn, ids))
        if copy_to:
            # Beams re-ranked: a parent's second child takes a copy of its self-attention
            # cache (one copy per buffer for all jobs; sources are rows kept as they are, so
            # nothing is overwritten before it is read). Cross keys/values are the same in
            # every beam row of a job. Values: only the slots the parents have written (a row's
            # token at position p sits in slot p, the mask, copied whole, hides every slot past
            # it and a hidden slot's weight is exactly 0, so the child reads the same bits). The
            # buffers are as wide as the batch's longest target and room to grow, often several
            # times a reranked job's own under continuous batching. Keys whole: their slots are
            # the last axis, and copying short runs of them was no faster than whole rows.
            to, of = np.array(copy_to), np.array(copy_from)
            written = (shared if shared is not None else int(positions[of, 0].max())) + 1
            for buf in self.past_k:  # (rows, H, Dh, slots)
                buf[to] = buf[of]
            for buf in self.past_v:  # (rows, H, slots, Dh)
                buf[to, :, :written] = buf[of, :, :written]
            self.past_mask[to] = self.past_mask[of]
        return finished

    def suspend(self, jobs: list[Job]) -> list[Suspended]:
        """Take ``jobs`` out of the batch with everything their rows hold (their source's
        cross-attention keys and values, their self-attention cache), so that ``resume`` puts
        them back exactly where they stopped: a job's row reads its own slots and its own
        source only, so what it decodes stays what it decodes alone (the scheduler makes room
        this way for interactive work without recomputing anything)."""
        out = []
        for job in jobs:
            rows = self.rows_of[job.id]
            used, width = job.step, len(job.src)  # slot p holds position p; the source's own positions
            s = int(self._sources(rows)[0])  # every row of a job reads the same source
            encoded = Encoded([job], [k[s:s + 1, :, :, :width].copy() for k in self.cross_k],
                              [v[s:s + 1, :, :width].copy() for v in self.cross_v],
                              self.src_mask[rows[:1], :width].copy(), np.zeros(1, dtype=np.int64))
            out.append(Suspended(encoded, [k[rows, :, :, :used].copy() for k in self.past_k],
                                 [v[rows, :, :used].copy() for v in self.past_v], self.past_mask[rows, :used].copy()))
        self.remove({j.id for j in jobs})
        return out

    def resume(self, suspended: list[Suspended]) -> None:
        """Suspended jobs join again, each with the cache it left with (``suspend``)."""
        if not suspended:
            return
        self.add([s.encoded for s in suspended])
        self._fit_slots(max(s.mask.shape[1] for s in suspended))
        for s in suspended:
            rows, used = self.rows_of[s.encoded.jobs[0].id], s.mask.shape[1]
            for buf, keys in zip(self.past_k, s.keys):
                buf[rows, :, :, :used] = keys
            for buf, values in zip(self.past_v, s.values):
                buf[rows, :, :used] = values
            self.past_mask[rows, :used] = s.mask

    def probe(self, job: Job) -> bool:
        """Run one job's rows alone through the decoder, changing nothing: does it succeed?"""
        rows = self.rows_of[job.id]
        sources = self._sources(rows)
        vocab = None if self.vocab is None else (self.vocab, self.vocab_mask[rows])
        try:
            self.rt.step(job.last[:, None], np.full((job.k, 1), job.step, dtype=np.int64), self.past_mask[rows],
                         self.src_mask[rows], [c[sources] for c in self.cross_k], [c[sources] for c in self.cross_v],
                         [c[rows] for c in self.past_k], [c[rows] for c in self.past_v], vocab)
        except Exception:
            return False
        return True


class ResidentBatch:
    """The running batch with its caches on the sessions' device (CUDA; the CPU in tests).

    The same jobs, rows and search as ``Batch``, over the step and rows graphs of
    engine/contract.py: the cache and the sources' keys and values are onnxruntime values
    that stay on the device between steps. In go each row's token, position, running score,
    masks and a row reorder; out come the K best candidates per row (K = 1 for greedy, 2 x
    beam), and the cross-attention only when a job asked for it. A step appends one cache
    slot for every row (the reordered cache plus the new keys and values, in the graph);
    beams are re-ranked on the host from the candidates, and a parent's second child takes
    its cache through the next step's reorder. When jobs join, the rows graph rebuilds the
    buffers once: kept rows in order, newcomers' encoder rows per beam, cache slots no live
    row uses dropped, the source width fitted to the longest live source. Jobs that leave
    leave their rows behind, dead (fed pad, their outputs unread), until dead rows are
    ``COMPACT_AT`` of the buffers or jobs join: a greedy batch of 256 lost a job at nearly
    every step, and a rebuild per step nearly doubled the graph runs (33 rows runs beside 35
    steps; bench/studies/resident_rows.py).

    On a GPU the per-step copy of the cache (a graph cannot write into its input) costs
    what reading it does anyway; on the CPU ``Batch`` is faster (it writes one slot in place
    and onnxruntime reads numpy arrays without copying), so the CPU uses ``Batch``.

    Every row runs at every step: ``Batch``'s first step on unexpanded rows (one row per beam
    job) is not done here, since the step graph takes one source per row and returns the whole
    cache, so running fewer rows would take a rows-graph rebuild of the buffers before the step
    and another after it; a GPU step of k times the rows costs little more anyway.
    """

    COMPACT_AT = 0.5  # the share of dead rows at which leaving jobs' rows are dropped

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.jobs: list[Job] = []
        self.rows_of: dict[int, np.ndarray] = {}  # job id -> its rows (beam order)
        n_layers = runtime.n_layers
        self._host_step_inputs = 8  # input_ids .. top_k: contract.step_inputs before the per-layer values
        self._step_values = contract.step_inputs(n_layers)[self._host_step_inputs:]
        self._rows_values = contract.rows_inputs(n_layers)[5:]  # after the five index inputs
        self._no_newcomers = (*runtime.empty_values(contract.ENC_K), *runtime.empty_values(contract.ENC_V))
        self._empty()

    def _empty(self) -> None:
        rt = self.rt
        self.cross_k, self.cross_v = rt.empty_values(contract.CROSS_K), rt.empty_values(contract.CROSS_V)
        self.cache_k, self.cache_v = rt.empty_values(contract.CACHE_K), rt.empty_values(contract.CACHE_V)
        self.past_mask = np.zeros((0, 0), dtype=bool)
        self.src_mask = np.zeros((0, 0), dtype=bool)
        self.reorder = np.zeros(0, dtype=np.int64)  # row i continues row reorder[i]'s cache at the next step
        self.live = np.zeros(0, dtype=bool)  # per buffer row: does it belong to a job (else dead)

    @property
    def n(self) -> int:
        """The jobs' rows (what the scheduler counts); the buffers may hold dead rows beside them."""
        return int(self.live.sum())

    @property
    def capacity(self) -> tuple[int, int, int]:
        """(rows, cache slots, source width) the device buffers hold, dead rows included."""
        return self.live.size, self.past_mask.shape[1], self.src_mask.shape[1]

    def __len__(self) -> int:
        return len(self.jobs)

    def _rebuild(self, kept: np.ndarray, new: Encoded | None) -> None:
        """New device buffers: the old rows ``kept`` (in that order), then ``new``'s jobs, one
        row per beam; slots no kept row uses and source columns past the longest are dropped."""
        old_rows = self.live.size
        slots = self.past_mask[kept].any(axis=0).nonzero()[0] if len(kept) else np.zeros(0, dtype=np.int64)
        used = self.src_mask[kept].any(axis=0).nonzero()[0]
        width = int(used[-1]) + 1 if used.size else 0
        old_width = self.src_mask.shape[1]
        if new is None:
            enc = self._no_newcomers
            expand, new_width, new_mask = np.zeros(0, dtype=np.int64), 0, np.zeros((0, 0), dtype=bool)
        else:
            enc = (*new.cross_k, *new.cross_v)
            per_job = np.repeat(np.arange(len(new.jobs)), [j.k for j in new.jobs])
            expand = new.rows[per_job]  # each new row's row of the encoder output
            new_width, new_mask = new.src_mask.shape[1], new.src_mask[per_job]
        width = max(width, new_width)
        cols = np.arange(width)
        host = {
            contract.CACHE_ROWS: np.concatenate([self.reorder[kept], np.full(len(expand), old_rows)]),
            contract.CACHE_SLOTS: slots,
            contract.CROSS_ROWS: np.concatenate([kept, old_rows + expand]).astype(np.int64),
            contract.OLD_COLS: np.minimum(cols, old_width),
            contract.NEW_COLS: np.minimum(cols, new_width),
        }
        out = self.rt.run_rows(host, dict(zip(self._rows_values, (*self.cross_k, *self.cross_v, *self.cache_k,
                                                                  *self.cache_v, *enc))))
        n = self.rt.n_layers
        self.cross_k, self.cross_v, self.cache_k, self.cache_v = (out[i * n:(i + 1) * n] for i in range(4))
        rows = len(kept) + len(expand)
        past_mask = np.zeros((rows, len(slots)), dtype=bool)
        past_mask[:len(kept)] = self.past_mask[kept][:, slots]
        src_mask = np.zeros((rows, width), dtype=bool)
        kept_src = self.src_mask[kept][:, :width]
        src_mask[:len(kept), :kept_src.shape[1]] = kept_src
        src_mask[len(kept):, :new_width] = new_mask
        self.past_mask, self.src_mask = past_mask, src_mask
        self.reorder = np.arange(rows, dtype=np.int64)
        self.live = np.ones(rows, dtype=bool)

    def _compact(self, new: Encoded | None) -> int:
        """Rebuild with the jobs' rows in job order (dead rows dropped), then ``new``'s; the
        jobs' rows renumbered once it succeeded. Returns the first of ``new``'s rows."""
        kept = (np.concatenate([self.rows_of[j.id] for j in self.jobs]) if self.jobs
                else np.zeros(0, dtype=np.int64))
        moved = np.empty(self.live.size, dtype=np.int64)
        moved[kept] = np.arange(len(kept))
        self._rebuild(kept, new)
        for j in self.jobs:
            self.rows_of[j.id] = moved[self.rows_of[j.id]]
        return len(kept)

    def add(self, groups: list[Encoded]) -> None:
        """Jobs join with their encoder output (device values); one rebuild per encoder run,
        which also drops the dead rows."""
        for group in Encoded.merge(groups):
            first = self._compact(group)
            for job, start in zip(group.jobs, np.cumsum([first, *[j.k for j in group.jobs][:-1]])):
                self.rows_of[job.id] = np.arange(start, start + job.k)
            self.jobs.extend(group.jobs)

    def remove(self, leaving: set[int]) -> None:
        """Drop the jobs whose ids are in ``leaving``; the others keep their order. Their rows
        stay in the buffers, dead, until dead rows are COMPACT_AT of them."""
        if not leaving:
            return
        for jid in leaving:
            self.live[self.rows_of.pop(jid)] = False
        self.jobs = [j for j in self.jobs if j.id not in leaving]
        if not self.jobs:
            self._empty()  # idle: give the device memory back
            return
        if (~self.live).sum() >= self.COMPACT_AT * self.live.size:
            self._compact(None)

    def _run(self, rows: np.ndarray | slice, values: tuple, reorder: np.ndarray, input_ids: np.ndarray,
             positions: np.ndarray, scores: np.ndarray, ban: np.ndarray, k: int, to_host: tuple[str, ...]) -> list:
        """The step graph over ``values`` (cross K/V then cache, per layer) holding the buffers' ``rows``."""
        host = {contract.INPUT_IDS: input_ids, contract.POSITIONS: positions,
                contract.PAST_MASK: self.past_mask[rows], contract.SRC_MASK: self.src_mask[rows],
                contract.REORDER: reorder, contract.SCORES: scores, contract.BAN_EOS: ban,
                contract.TOP_K: np.zeros(k, dtype=bool)}
        return self.rt.run_step(host, dict(zip(self._step_values, values)), to_host)

    def step(self) -> list[Job]:
        """One decoder step for every row; returns the jobs that finished."""
        n, rt = self.live.size, self.rt
        input_ids, positions, _ = row_inputs(self.jobs, self.rows_of, n)
        dead = ~self.live
        if dead.any():  # rows of jobs that left: any valid token will do, their outputs are not read
            input_ids[dead], positions[dead] = self.jobs[0].pad, 0
        scores = np.zeros(n, dtype=np.float32)  # greedy rows: the candidates are the log-probabilities
        ban = np.zeros(n, dtype=bool)
        for j in self.jobs:
            if j.k > 1:
                scores[self.rows_of[j.id]] = j.scores
            if j.no_eos:  # no eos before a job's min_len
                ban[self.rows_of[j.id]] = True
        # Banned ids are dropped from the candidates on the host: K leaves room for them.
        k = min(max(1 if j.k == 1 else 2 * j.k for j in self.jobs) + max(len(j.banned) for j in self.jobs),
                rt.package.dims.vocab_size)
        attention = any(j.options.attention for j in self.jobs)
        to_host = (contract.TOP_VALUES, contract.TOP_IDS) + ((contract.CROSS_ATTENTION,) if attention else ())
        out = self._run(slice(None), (*self.cross_k, *self.cross_v, *self.cache_k, *self.cache_v), self.reorder,
                        input_ids, positions, scores, ban, k, to_host)
        values, ids = out[0].numpy(), out[1].numpy()
        first = np.zeros(n, dtype=np.int64)  # each row's best candidate that is not banned
        if any(j.banned for j in self.jobs):
            values = values.copy()
            for j in self.jobs:
                if j.banned:
                    rows = self.rows_of[j.id]
                    values[rows] = np.where(np.isin(ids[rows], j.banned), NEG_INF, values[rows])
            first = np.argmax(values > NEG_INF, axis=1)
        layers = rt.n_layers
        self.cache_k, self.cache_v = out[3:3 + layers], out[3 + layers:]
        self.past_mask = np.concatenate([self.past_mask, np.ones((n, 1), dtype=bool)], axis=1)
        self.reorder = np.arange(n, dtype=np.int64)
        finished, copy_to, copy_from = advance_jobs(
            self.jobs, self.rows_of, out[2].numpy() if attention else None,
            lambda row: (int(ids[row, first[row]]), values[row, first[row]]),
            lambda job, rows, attn: job.advance_top(values[rows], ids[rows], attn))
        if copy_to:  # a parent's second child continues its parent's cache: the next step gathers it
            self.reorder[copy_to] = copy_from
            self.past_mask[copy_to] = self.past_mask[copy_from]
        return finished

    def probe(self, job: Job) -> bool:
        """Run one job's rows alone through the step graph, changing nothing: does it succeed?"""
        rows = self.rows_of[job.id]
        try:
            # The job's own buffers (its rows, the pending reorder applied), then one step on them.
            values = self.rt.run_rows({contract.CACHE_ROWS: self.reorder[rows],
                                       contract.CACHE_SLOTS: np.arange(self.past_mask.shape[1]),
                                       contract.CROSS_ROWS: rows, contract.OLD_COLS: np.arange(self.src_mask.shape[1]),
                                       contract.NEW_COLS: np.zeros(self.src_mask.shape[1], dtype=np.int64)},
                                      dict(zip(self._rows_values, (*self.cross_k, *self.cross_v, *self.cache_k,
                                                                   *self.cache_v, *self._no_newcomers))))
            self._run(rows, values, np.arange(job.k, dtype=np.int64), job.last[:, None],
                      np.full((job.k, 1), job.step, dtype=np.int64), np.zeros(job.k, dtype=np.float32),
                      np.zeros(job.k, dtype=bool), 1, (contract.TOP_VALUES, contract.TOP_IDS))
        except Exception:
            return False
        return True


def new_batch(runtime: Runtime) -> Batch | ResidentBatch:
    """The running batch for ``runtime``: device-resident when its sessions are."""
    return ResidentBatch(runtime) if runtime.resident else Batch(runtime)


def ban(logp: np.ndarray, jobs: list[Job], rows_of: dict[int, np.ndarray], ids: np.ndarray | None) -> None:
    """Every job's banned ids at -inf in its rows of ``logp`` (with a shortlist ``ids``, the
    columns of those it scores); jobs that ban the same ids share one assignment."""
    groups: dict[tuple[int, ...], list[np.ndarray]] = {}
    for j in jobs:
        if j.banned:
            groups.setdefault(j.banned, []).append(rows_of[j.id])
    for banned, rows in groups.items():
        cols = np.asarray(banned, dtype=np.int64)
        if ids is not None:
            at = np.searchsorted(ids, cols).clip(max=ids.size - 1)
            cols = at[ids[at] == cols]
        logp[np.concatenate(rows)[:, None], cols[None, :]] = NEG_INF


def row_inputs(jobs: list[Job], rows_of: dict[int, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Each of the ``n`` rows' last token and its position, (n, 1) each, and that position when
    every row has the same one (jobs that started together), else None. Paid at every token:
    the common cases (one job, one shared position) take a few numpy calls."""
    steps = [j.step for j in jobs]
    shared = steps[0] if min(steps) == max(steps) else None
    if len(jobs) == 1:
        rows, last = rows_of[jobs[0].id], jobs[0].last
    else:
        rows, last = np.concatenate([rows_of[j.id] for j in jobs]), np.concatenate([j.last for j in jobs])
    input_ids = np.empty((n, 1), dtype=np.int64)
    input_ids[rows, 0] = last
    if shared is not None:
        positions = np.full((n, 1), shared, dtype=np.int64)
    else:
        positions = np.empty((n, 1), dtype=np.int64)
        positions[rows, 0] = np.repeat(steps, [j.k for j in jobs])
    return input_ids, positions, shared


def advance_jobs(jobs: list[Job], rows_of: dict[int, np.ndarray], attention: np.ndarray | None,
                 greedy: Callable[[int], tuple[int, np.float32]],
                 beam: Callable[[Job, np.ndarray, np.ndarray | None], np.ndarray]
                 ) -> tuple[list[Job], list[int], list[int]]:
    """Every job's search step once the batch has run the decoder: ``greedy(row)`` gives a
    greedy row's token and log-probability, ``beam(job, rows, attention)`` advances a beam
    job and returns its parents. Beam jobs' rows are re-assigned in ``rows_of``; returns the
    jobs that finished and the rows whose caches must be copied (destination, source)."""
    finished: list[Job] = []
    copy_to: list[int] = []  # beam rows that take another row's cache
    copy_from: list[int] = []
    for job in jobs:
        rows = rows_of[job.id]
        attn = attention[rows, : len(job.src)].astype(np.float32) if job.options.attention else None
        if job.k == 1:
            job.advance_greedy(*greedy(int(rows[0])), attn)
        else:
            parents = beam(job, rows, attn)
            rows_of[job.id], to, of = beam_rows(rows, parents, job.scores > NEG_INF)
            copy_to += to
            copy_from += of
        if job.done:
            finished.append(job)
    return finished, copy_to, copy_from


class Encoded(NamedTuple):
    """Jobs of one encoder run: the run's cross-attention keys/values per decoder layer, and
    which of its rows each job's is. The scheduler hands jobs to the batch one by one, each
    ``take``-n from its run without copying (device values cannot be sliced)."""

    jobs: list[Job]
    cross_k: list  # per layer (run rows, H, Dh, S): numpy arrays, or device values (ResidentBatch)
    cross_v: list  # per layer (run rows, H, S, Dh)
    src_mask: np.ndarray  # (len(jobs), S)
    rows: np.ndarray  # (len(jobs),) each job's row of the run

    def take(self, i: int) -> Encoded:
        """The ``i``-th job alone, over the same buffers."""
        return Encoded([self.jobs[i]], self.cross_k, self.cross_v, self.src_mask[i:i + 1], self.rows[i:i + 1])

    @staticmethod
    def merge(entries: list[Encoded]) -> list[Encoded]:
        """Entries of the same run joined into one (ResidentBatch rebuilds once per run)."""
        runs: dict[int, list[Encoded]] = {}
        for e in entries:
            runs.setdefault(id(e.cross_k), []).append(e)
        out = []
        for same in runs.values():
            width = max(e.src_mask.shape[1] for e in same)
            mask = np.concatenate([np.pad(e.src_mask, ((0, 0), (0, width - e.src_mask.shape[1]))) for e in same])
            out.append(Encoded([j for e in same for j in e.jobs], same[0].cross_k, same[0].cross_v, mask,
                               np.concatenate([e.rows for e in same])))
        return out


class Suspended(NamedTuple):
    """A job out of the batch (``Batch.suspend``): its source as one encoder row, and its rows'
    self-attention cache in beam order, per decoder layer, over the slots it has used."""

    encoded: Encoded
    keys: list[np.ndarray]  # per layer (k, H, Dh, used slots)
    values: list[np.ndarray]  # per layer (k, H, used slots, Dh)
    mask: np.ndarray  # (k, used slots)


# The encoder's cost is its padded size (rows x longest source), plus a fixed cost per run
# worth about this many tokens (streaming the weights once; measured at ~15 tokens fp32).
GROUP_PADDING = 0.10  # a group may pad its tokens by this fraction ...
GROUP_MIN_PADDING = 16  # ... or by this many tokens, whichever is more


def length_groups(jobs: list[Job]) -> list[list[Job]]:
    """Newcomers sorted by source length and cut into groups that waste little on padding:
    one encoder run for sources of 11 to 61 tokens pads them by up to 40 %."""
    groups: list[list[Job]] = []
    current: list[Job] = []
    tokens = 0
    for j in sorted(jobs, key=lambda j: len(j.src)):
        n = len(j.src)
        padding = (len(current) + 1) * n - (tokens + n)  # sorted: j is the longest so far
        if current and padding > max(GROUP_MIN_PADDING, GROUP_PADDING * (tokens + n)):
            groups.append(current)
            current, tokens = [], 0
        current.append(j)
        tokens += n
    if current:
        groups.append(current)
    return groups


def encode_jobs(runtime: Runtime, jobs: list[Job]) -> list[Encoded]:
    """Encode newcomers: one encoder run per length group (right-padded within it)."""
    out = []
    for group in length_groups(jobs):
        width = max(len(j.src) for j in group)
        src = np.full((len(group), width), group[0].pad, dtype=np.int64)
        for i, j in enumerate(group):
            src[i, : len(j.src)] = j.src
        cross_k, cross_v = runtime.encode_values(src) if runtime.resident else runtime.encode(src)
        out.append(Encoded(group, cross_k, cross_v, src != group[0].pad, np.arange(len(group))))
    return out


def decode_all(runtime: Runtime, jobs: list[Job]) -> list[list[Hypothesis]]:
    """Offline decoding of a fixed set of jobs in one batch (benchmarks, warm-up)."""
    batch = new_batch(runtime)
    batch.add(encode_jobs(runtime, jobs))
    while batch.jobs:
        batch.remove({j.id for j in batch.step()})
    return [j.result or [] for j in jobs]
