"""The whole decoding loop: greedy and beam search over the decoder-step graph, batched
continuously.

A ``Job`` is one source text; it owns ``beam_size`` rows of the running ``Batch`` (one
for greedy). At every step the batch feeds each row's last token at its own position;
rows that joined later have their older cache columns masked out, so jobs at different
lengths share one step. Jobs join between steps (after one encoder run for all newcomers)
and leave when finished, cancelled or expired; the cache is compacted when its oldest
columns are no longer used by any row.

Beams of one job share their source's cross-attention keys/values: those are laid out
once per row when the job joins, and only the self-attention cache is reordered when
beams are re-ranked. The search itself mirrors ``training/decode.py`` step for step (the
reference the tests hold it to), so a text decoded in any batch gives the tokens it
gets alone.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from server.runtime import Runtime

NEG_INF = -np.inf


@dataclass(frozen=True)
class DecodeOptions:
    beam_size: int = 1
    n_best: int = 1
    alpha: float = 0.6  # GNMT length penalty ((5 + |Y|) / 6) ^ alpha, beam search only
    max_len: int = 0  # 0: min(model limit, 1.5 x source + 10)
    min_len: int = 0
    attention: bool = False


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # without bos and eos
    score: float
    attention: np.ndarray | None = None  # (len(tokens), source length) when asked for


def default_max_len(src_len: int, cap: int) -> int:
    """The output-length bound of one source: 1.5 x its length + 10, at most ``cap`` (the
    same rule as the PyTorch reference, per sentence, so the batch never changes it)."""
    return min(cap, int(1.5 * src_len) + 10)


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float32; one working copy, updated in place (half the time of
    the three-temporary form at 32 x 8000, same values)."""
    out = x.astype(np.float32, copy=True)
    out -= out.max(axis=-1, keepdims=True)
    out -= np.log(np.exp(out).sum(axis=-1, keepdims=True))
    return out


_ids = itertools.count()


@dataclass(eq=False)
class Job:
    """One source being decoded; ``result`` is set when it is done."""

    src: list[int]  # tag + pieces + eos
    options: DecodeOptions
    max_len: int
    bos: int
    eos: int
    pad: int
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

    def advance(self, logp: np.ndarray, attention: np.ndarray | None) -> np.ndarray | None:
        """Consume this step's log-probabilities (k, V); return the beam rows to keep, in
        their new order (None: no reordering)."""
        if self.step < self.options.min_len:
            logp[:, self.eos] = NEG_INF
        perm = self._greedy(logp, attention) if self.k == 1 else self._beam(logp, attention)
        self.step += 1
        if not self.done and self.step >= self.max_len:
            self._finish_live()
        return perm

    def _greedy(self, logp: np.ndarray, attention: np.ndarray | None) -> None:
        token = int(logp[0].argmax())
        self.scores[0] += logp[0, token]
        if token == self.eos:
            self._finish([Hypothesis(self.beams[0], float(self.scores[0]), self._attn(0))])
            return None
        self.beams[0].append(token)
        if attention is not None:
            self.attn[0].append(attention[0])
        self.last[0] = token
        return None

    def _beam(self, logp: np.ndarray, attention: np.ndarray | None) -> np.ndarray:
        k, vocab = logp.shape
        alpha = self.options.alpha
        cand = (self.scores[:, None] + logp).reshape(-1)
        top = np.argpartition(-cand, 2 * k)[: 2 * k] if cand.size > 2 * k else np.arange(cand.size)
        top = top[np.lexsort((top, -cand[top]))]  # best first; ties by index, as a stable sort would
        rows, tokens, scores = [], [], []
        for flat in top:
            score = float(cand[flat])
            if len(rows) == k or score == NEG_INF:
                break
            row, token = divmod(int(flat), vocab)
            if token == self.eos:
                if len(self.finished) < k:
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
        if self.k == 1:
            self._finish([Hypothesis(self.beams[0], float(self.scores[0]), self._attn(0))])
            return
        for row in range(self.k):
            if self.scores[row] > NEG_INF:
                hyp = self.beams[row]
                self.finished.append(Hypothesis(hyp, float(self.scores[row]) / length_penalty(len(hyp),
                                                                                              self.options.alpha),
                                                self._attn(row)))
        self._finish(self.finished)

    def _finish(self, hyps: list[Hypothesis]) -> None:
        self.done = True
        ranked = sorted(hyps, key=lambda h: h.score, reverse=True) if self.k > 1 else hyps
        self.result = ranked[: self.options.n_best]


class Batch:
    """The running batch: rows of every active job, their caches and masks.

    Rows are slots. A job that leaves only has its rows marked free (masked out, fed pad);
    a newcomer reuses free slots in place, so joins and leaves do not copy the whole
    batch. The arrays are rebuilt (free rows dropped, padding trimmed) only when free rows
    pile up, and unused leading cache columns are dropped in chunks.
    """

    COMPACT_FREE_FRACTION = 0.5
    TRIM_COLUMNS = 16
    TRIM_SOURCE_COLUMNS = 8

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.jobs: list[Job] = []
        self.slots: dict[int, np.ndarray] = {}  # job id -> its rows (beam order)
        self.free: list[int] = []
        self.src_mask = np.zeros((0, 0), dtype=bool)
        self.cross_k = runtime.empty_cache(0)
        self.cross_v = runtime.empty_cache(0)
        self.past_k = runtime.empty_cache(0)
        self.past_v = runtime.empty_cache(0)
        self.past_mask = np.zeros((0, 0), dtype=bool)

    @property
    def rows(self) -> int:
        """Rows in use by jobs (free slots excluded)."""
        return self.src_mask.shape[0] - len(self.free)

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, jobs: list[Job], cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray) -> None:
        """Jobs join with one encoder output row each; every beam row gets its source's K/V."""
        s = max(self.src_mask.shape[1], src_mask.shape[1])
        if s > self.src_mask.shape[1]:  # a longer source than any so far: widen (rare once warm)
            self.cross_k, self.cross_v = _pad_axis(self.cross_k, 3, s), _pad_axis(self.cross_v, 3, s)
            self.src_mask = _pad_axis(self.src_mask, 1, s)
        cross_k, cross_v, src_mask = _pad_axis(cross_k, 3, s), _pad_axis(cross_v, 3, s), _pad_axis(src_mask, 1, s)
        needed = sum(j.k for j in jobs)
        extra = max(0, needed - len(self.free))
        if extra:  # grow once for all newcomers that do not fit in free slots
            n, p = self.src_mask.shape[0], self.past_mask.shape[1]
            self.cross_k = np.concatenate([self.cross_k, np.zeros_like(cross_k[:, :1]).repeat(extra, 1)], axis=1)
            self.cross_v = np.concatenate([self.cross_v, np.zeros_like(cross_v[:, :1]).repeat(extra, 1)], axis=1)
            self.src_mask = np.concatenate([self.src_mask, np.zeros((extra, s), dtype=bool)], axis=0)
            self.past_k = np.concatenate([self.past_k, self.rt.empty_cache(extra, p)], axis=1)
            self.past_v = np.concatenate([self.past_v, self.rt.empty_cache(extra, p)], axis=1)
            self.past_mask = np.concatenate([self.past_mask, np.zeros((extra, p), dtype=bool)], axis=0)
            self.free.extend(range(n, n + extra))
        self.free.sort(reverse=True)
        for i, job in enumerate(jobs):
            rows = np.array([self.free.pop() for _ in range(job.k)])
            self.slots[job.id] = rows
            self.cross_k[:, rows] = cross_k[:, i:i + 1]
            self.cross_v[:, rows] = cross_v[:, i:i + 1]
            self.src_mask[rows] = src_mask[i]
            self.past_mask[rows] = False  # the new rows see none of the cache before them
        self.jobs.extend(jobs)

    def remove(self, leaving: set[int]) -> None:
        """Free the rows of the jobs whose ids are in ``leaving``."""
        if not leaving:
            return
        self.jobs = [j for j in self.jobs if j.id not in leaving]
        for jid in leaving:
            rows = self.slots.pop(jid)
            self.src_mask[rows] = False
            self.past_mask[rows] = False
            self.free.extend(int(r) for r in rows)
        if not self.jobs or len(self.free) > self.COMPACT_FREE_FRACTION * self.src_mask.shape[0]:
            self._compact()
            return
        start, width = self._live_columns()
        if start >= self.TRIM_COLUMNS:  # drop cache columns no row uses any more
            self.past_mask = self.past_mask[:, start:]
            self.past_k, self.past_v = self.past_k[:, :, :, start:], self.past_v[:, :, :, start:]
        # The source width only grows while rows come and go; when the longest sources have
        # left, narrow it again: every step reads (and onnxruntime copies) cross K/V in full.
        if self.src_mask.shape[1] - width >= self.TRIM_SOURCE_COLUMNS:
            self.src_mask = np.ascontiguousarray(self.src_mask[:, :width])
            self.cross_k = np.ascontiguousarray(self.cross_k[:, :, :, :width])
            self.cross_v = np.ascontiguousarray(self.cross_v[:, :, :, :width])

    def _live_columns(self) -> tuple[int, int]:
        """The first cache column any row still uses, and the source width the rows need
        (free rows have all-False masks, so they count for nothing)."""
        used = self.past_mask.any(axis=0).nonzero()[0]
        src = self.src_mask.any(axis=0).nonzero()[0]
        return (int(used[0]) if used.size else self.past_mask.shape[1]), (int(src[-1]) + 1 if src.size else 0)

    def _compact(self) -> None:
        """Rebuild with live rows only; trim source padding and unused cache columns."""
        start, s = self._live_columns()
        keep = np.concatenate([self.slots[j.id] for j in self.jobs]) if self.jobs else np.zeros(0, dtype=np.int64)
        self.src_mask, self.past_mask = self.src_mask[keep, :s], self.past_mask[keep, start:]
        self.cross_k, self.cross_v = self.cross_k[:, keep, :, :s], self.cross_v[:, keep, :, :s]
        self.past_k, self.past_v = self.past_k[:, keep, :, start:], self.past_v[:, keep, :, start:]
        offset = 0
        for j in self.jobs:
            self.slots[j.id] = np.arange(offset, offset + j.k)
            offset += j.k
        self.free = []

    def step(self) -> list[Job]:
        """One decoder step for every row; returns the jobs that finished."""
        total = self.src_mask.shape[0]
        input_ids = np.full((total, 1), self.jobs[0].pad, dtype=np.int64)
        positions = np.zeros((total, 1), dtype=np.int64)
        for j in self.jobs:
            rows = self.slots[j.id]
            input_ids[rows, 0] = j.last
            positions[rows, 0] = j.step
        live = np.ones(total, dtype=bool)
        live[self.free] = False
        logits, self.past_k, self.past_v, attention = self.rt.step(
            input_ids, positions, self.past_mask, self.src_mask, self.cross_k, self.cross_v, self.past_k, self.past_v)
        self.past_mask = np.concatenate([self.past_mask, live[:, None]], axis=1)
        logp = log_softmax(logits)
        perm: np.ndarray | None = None
        finished = []
        for job in self.jobs:
            rows = self.slots[job.id]
            attn = attention[rows, : len(job.src)].astype(np.float32) if job.options.attention else None
            local = job.advance(logp[rows], attn)
            if local is not None and not np.array_equal(local, np.arange(job.k)):
                if perm is None:
                    perm = np.arange(total)
                perm[rows] = rows[local]
            if job.done:
                finished.append(job)
        if perm is not None:
            self.past_k, self.past_v = self.past_k[:, perm], self.past_v[:, perm]
            self.past_mask = self.past_mask[perm]
        return finished

    def probe(self, job: Job) -> bool:
        """Run one job's rows alone through the decoder, changing nothing: does it succeed?"""
        rows = self.slots[job.id]
        try:
            self.rt.step(job.last[:, None], np.full((job.k, 1), job.step, dtype=np.int64), self.past_mask[rows],
                         self.src_mask[rows], self.cross_k[:, rows], self.cross_v[:, rows], self.past_k[:, rows],
                         self.past_v[:, rows])
        except Exception:
            return False
        return True


def _pad_axis(x: np.ndarray, axis: int, size: int) -> np.ndarray:
    if x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return np.pad(x, widths)


def encode_jobs(runtime: Runtime, jobs: list[Job]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One encoder run for several newcomers (right-padded together)."""
    width = max(len(j.src) for j in jobs)
    src = np.full((len(jobs), width), jobs[0].pad, dtype=np.int64)
    for i, j in enumerate(jobs):
        src[i, : len(j.src)] = j.src
    cross_k, cross_v = runtime.encode(src)
    return cross_k, cross_v, src != jobs[0].pad


def decode_all(runtime: Runtime, jobs: list[Job]) -> list[list[Hypothesis]]:
    """Offline decoding of a fixed set of jobs in one batch (benchmarks, warm-up)."""
    batch = Batch(runtime)
    batch.add(jobs, *encode_jobs(runtime, jobs))
    while batch.jobs:
        batch.remove({j.id for j in batch.step()})
    return [j.result or [] for j in jobs]
