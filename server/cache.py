"""The sentence cache: decoded sentences kept by everything that decides their translation, so
that a sentence sent again (a web page's menu, a document's repeated lines, a client that
retries) is answered without decoding it again.

The key (``job_key``) is a digest of the model as it runs (model.json's checksum, which covers
the sha256 of every file, and the graph variant, device, cache residency and shortlist in use)
and of everything a ``Job`` decodes from: the source ids the encoder reads (after normalisation
and placeholder protection: the sentence as the model sees it), the forced prefix, the banned
ids, the special ids, the output-length bound and every decoding option (beam, n-best, length
penalty, minimum length, attention). The value is the engine's hypotheses (tokens, score,
attention, stop reason), so that whatever the service does after decoding (placeholders put
back, the checks, the retry with spans as text, scores and attention on the wire) runs on a
cached answer as on a fresh one.

A cached answer equals a fresh one only where decoding is batch-invariant: a sentence decodes
to the same tokens and scores alone as in any batch (engine/decoding.py). That holds on the CPU,
int8 (each row's activations quantized on their own) and fp32 (docs/BENCHMARKS.md,
tests/test_server.py); on CUDA it is not shown, so ``auto`` leaves the cache off there
(--cache, server/config.py). Identical sentences in flight are decoded once: a request whose sentence is being
decoded for another request of the same or a more urgent priority waits for that answer (and
decodes it itself if that request fails or leaves), and a sentence repeated within a request is
decoded once.

Bounded in bytes (--cache-bytes: what the entries hold, measured with ``sys.getsizeof``), least
recently used out first; in memory, one per server process. Used from the event loop only.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import sys
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from engine.decoding import Hypothesis, Job, StopReason
from engine.package import ModelPackage
from engine.runtime import Runtime
from server.metrics import Metrics
from server.scheduler import Priority

# The fields of a Job that decide what it decodes to (the key covers them) and those that are
# its decoding state; a test holds the two to the Job's fields, so a new field must be placed.
KEYED_FIELDS = ("src", "options", "max_len", "bos", "eos", "pad", "prefix", "banned")
STATE_FIELDS = ("id", "step", "done", "result")
# What a cache entry costs beyond its objects: the ordered dict's node and its slot.
ENTRY_OVERHEAD = 104
TOKEN_TYPE = "i"  # token ids stored as 32-bit integers

Submit = Callable[[list[Job]], Awaitable[list[list[Hypothesis]]]]


def batch_invariant(rt: Runtime) -> bool:
    """Whether a sentence decodes the same alone as in any batch on this runtime: on the CPU."""
    return rt.device == "cpu"


def used(mode: str, max_bytes: int, rt: Runtime) -> bool:
    """Whether a model on ``rt`` has its sentences cached, by --cache ``mode`` and --cache-bytes."""
    return max_bytes > 0 and (mode == "on" or (mode == "auto" and batch_invariant(rt)))


def model_identity(package: ModelPackage, rt: Runtime) -> str:
    """The model as it runs: its exact package and how its graphs are run."""
    return repr((package.checksum, rt.variant, rt.device, rt.resident, rt.shortlist is not None))


def job_key(model: str, job: Job) -> bytes:
    """The digest of ``model`` (``model_identity``) and every field of ``job`` that decides
    what it decodes to (a repr of numbers and tuples: two different jobs never read alike)."""
    fields = (model, dataclasses.astuple(job.options), *(getattr(job, name) for name in KEYED_FIELDS))
    return hashlib.blake2b(repr(fields).encode(), digest_size=32).digest()


@dataclass(frozen=True, slots=True)
class Stored:
    """One hypothesis as the cache holds it: compact, and nothing in it can be changed."""

    tokens: bytes  # array(TOKEN_TYPE)
    score: float
    attention: np.ndarray | None  # read-only
    stop_reason: StopReason

    @classmethod
    def of(cls, h: Hypothesis) -> Stored:
        attention = None
        if h.attention is not None:
            attention = np.array(h.attention, copy=True)
            attention.flags.writeable = False
        return cls(array(TOKEN_TYPE, h.tokens).tobytes(), h.score, attention, h.stop_reason)

    def hypothesis(self) -> Hypothesis:
        tokens = array(TOKEN_TYPE)
        tokens.frombytes(self.tokens)
        return Hypothesis(tokens.tolist(), self.score, self.attention, self.stop_reason)

    @property
    def size(self) -> int:
        return sum(sys.getsizeof(x) for x in (self, self.tokens, self.score, self.attention))


@dataclass(eq=False)
class Flight:
    """A sentence being decoded for one request, which others of ``priority`` or less urgent wait for."""

    priority: Priority
    answer: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class SentenceCache:
    def __init__(self, max_bytes: int, mode: str = "auto", metrics: Metrics | None = None) -> None:
        self.max_bytes, self.mode, self.metrics = max_bytes, mode, metrics
        self._entries: collections.OrderedDict[bytes, tuple[tuple[Stored, ...], int]] = collections.OrderedDict()
        self.bytes = 0
        self._flights: dict[bytes, Flight] = {}
        if metrics:
            metrics.cache_bytes.set_function(lambda: self.bytes)
            metrics.cache_entries.set_function(lambda: len(self._entries))

    @property
    def entries(self) -> int:
        return len(self._entries)

    def used_for(self, rt: Runtime) -> bool:
        """Whether sentences of a model on ``rt`` are cached."""
        return used(self.mode, self.max_bytes, rt)

    def get(self, key: bytes) -> list[Hypothesis] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return [s.hypothesis() for s in entry[0]]

    def put(self, key: bytes, hypotheses: list[Hypothesis]) -> None:
        stored = tuple(Stored.of(h) for h in hypotheses)
        size = ENTRY_OVERHEAD + sys.getsizeof(key) + sys.getsizeof(stored) + sum(s.size for s in stored)
        if size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._entries[key] = (stored, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.bytes -= dropped

    async def decode(self, model: str, identity: str, jobs: list[Job], submit: Submit, priority: Priority,
                     deadline: float | None) -> list[list[Hypothesis]]:
        """Every job's hypotheses: from the cache, from an identical job in flight, else from
        ``submit`` (the scheduler, for the jobs this call decodes: one request for its fair
        admission); ``submit``'s refusals are raised as they come."""
        keys = [job_key(identity, job) for job in jobs]
        out: list[list[Hypothesis] | None] = [None] * len(jobs)
        todo: list[Job] = []
        mine: dict[bytes, int] = {}  # key -> its job's place in todo
        waits: list[tuple[int, asyncio.Future]] = []  # (place in jobs, another request's answer)
        led: list[bytes] = []  # the flights this call announced
        for i, (job, key) in enumerate(zip(jobs, keys)):
            if key in mine:
                continue  # a repeat within the call: decoded once
            if (found := self.get(key)) is not None:
                out[i] = found
                continue
            flight = self._flights.get(key)
            if flight is not None and flight.priority <= priority:
                waits.append((i, flight.answer))
                continue
            mine[key] = len(todo)
            todo.append(job)
            if flight is None:
                self._flights[key] = Flight(priority)
                led.append(key)
        decoded: list[list[Hypothesis]] = []
        try:
            decoded = await submit(todo) if todo else []
        finally:
            for key in led:  # the answer, or None: decode it yourself
                self._flights.pop(key).answer.set_result(decoded[mine[key]] if decoded else None)
        for key, place in mine.items():
            self.put(key, decoded[place])
        for i, key in enumerate(keys):
            if out[i] is None and key in mine:
                out[i] = decoded[mine[key]]
        shared, again = 0, []
        for i, answer in waits:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                got = await asyncio.wait_for(asyncio.shield(answer), left)
            except TimeoutError:
                got = None  # submitted again below: the scheduler answers that the deadline passed
            if got is None:
                again.append(i)
            else:
                out[i], shared = got, shared + 1
        if again:
            for i, hyps in zip(again, await submit([jobs[i] for i in again])):
                out[i] = hyps
                self.put(keys[i], hyps)
        if self.metrics:
            self.metrics.cache_hits.labels(model).inc(len(jobs) - len(todo) - len(again))
            self.metrics.cache_misses.labels(model).inc(len(todo) + len(again))
            self.metrics.cache_shared.labels(model).inc(shared)
        assert all(o is not None for o in out)
        return out  # type: ignore[return-value]
