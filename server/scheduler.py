"""One scheduler per model: a bounded queue, an encoding thread and a decoding thread
that batches continuously.

gRPC handlers only validate, ``submit_all`` a request's jobs and await the returned futures.
The encoding thread takes waiting jobs off the queue (up to one batch's rows ahead of the
decoder) and encodes them, in length groups, while the decoder runs: the encoder's cost
leaves the decoding loop (it was a quarter of it under 64 single-sentence clients, one small
encoder run per step) and uses a core the decoder leaves idle. The decoding thread, at
every step: evicts cancelled and expired jobs (freeing their rows), admits encoded jobs
while the batch has rows and tokens to spare, runs one decoder step for every row and
resolves the jobs that finished. onnxruntime releases the GIL while it runs, so both
threads and the event loop make progress together.

Admission is fair between requests (a request is one ``submit_all``: its ``Share``), not
first in, first out: a one-sentence request that arrives behind another's thousand
sentences joins the batch as soon as rows free up, not after them. Whenever rows free up
(and whenever the encoder picks its next job) the next job comes from the request that
ranks first by
  1. priority: interactive before bulk, where a bulk request that has waited BULK_WAIT
     seconds counts as interactive (an age bound: bulk work is never starved by a stream of
     interactive requests);
  2. the rows it holds (in the batch, and for the encoder also staged): fewest first, so the
     requests waiting share the batch and each one's share tends to 1/n of it; a request
     alone takes all of it (no row stays idle for a request that may come);
  3. turns: the request served longest ago (a newcomer: by arrival) first, round robin.
A request's own jobs keep their order. The best-ranked job that does not fit waits for its
rows and nothing jumps past it (a beam-4 job is not starved by one-row jobs). A running job
keeps its rows until it finishes, with one exception: while interactive work is in the batch
or ready to join it, bulk work holds at most ``interactive_rows`` rows less those the
interactive work takes, but always one job (so a stream of interactive requests slows bulk
work and never stops it). Bulk jobs above that are suspended, newest first
(engine/decoding.py ``Batch.suspend``: their caches leave the batch intact, nothing is
recomputed) and rejoin, before any new bulk job, once no interactive work is left. A step's cost grows with its
rows (int8, one thread: 4 rows 6 ms, 16 rows 16 ms, 64 rows 51 ms), so a single sentence
decodes at close to its idle speed beside a saturating bulk load, and bulk work gives up
rows only while someone waits interactively. Device-resident batches (CUDA) do not suspend. The stage holds
one batch's rows, and a request that holds no rows at all may stage its first job into a
second batch's rows: a newcomer is encoded at once, not after the stage drains. Which jobs
share a step never changes what a job decodes (engine/decoding.py: a text gives the tokens
it gets alone).

A failure is confined to the job that caused it: a failing encoder run for several
newcomers is retried one by one, and a failing step is probed job by job, so one bad
item fails alone while the others carry on.
"""

from __future__ import annotations

import collections
import concurrent.futures
import enum
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

from engine.decoding import Encoded, Job, Suspended, encode_jobs, new_batch
from engine.runtime import Runtime
from server.config import INTERACTIVE_ROWS, MAX_BATCH_ROWS, MAX_QUEUE, MAX_TOKENS_IN_FLIGHT
from server.metrics import Metrics

log = logging.getLogger("nmt.server")
# Seconds after which a bulk request's waiting jobs rank as interactive ones (by rows held,
# then age): what bulk work waits at most behind interactive work before it gets its turns.
BULK_WAIT = 2.0
_turns = itertools.count()  # orders arrivals and turns (a job taken by the encoder, a job admitted)


class QueueFull(Exception):
    """The waiting queue is full: the caller gets RESOURCE_EXHAUSTED at once."""


class DeadlineExpired(Exception):
    """The job's deadline passed before it finished; its rows were freed."""


class JobCancelled(Exception):
    """The caller went away; its rows were freed."""


class JobFailed(Exception):
    """The model failed on this job (the others in its batch were not affected)."""


class Priority(enum.IntEnum):
    """Who waits for a request; the values are the wire's (nmt.v1.Priority)."""

    INTERACTIVE = 1
    BULK = 2

    @classmethod
    def of(cls, value: int) -> Priority:
        """The wire's value: BULK is bulk, anything else (UNSPECIFIED, a value this server
        does not know) interactive."""
        return cls.BULK if value == cls.BULK else cls.INTERACTIVE


@dataclass(frozen=True)
class SchedulerLimits:
    max_batch_rows: int = MAX_BATCH_ROWS  # beam rows decoded together in one step
    max_tokens_in_flight: int = MAX_TOKENS_IN_FLIGHT  # sum over running jobs of rows x (source + max output) tokens
    max_queue: int = MAX_QUEUE  # jobs waiting to join the batch
    bulk_wait: float = BULK_WAIT  # seconds before a bulk request ranks as an interactive one
    # Rows of the batch while interactive work runs or is ready to join, bulk rows suspended above
    # it (module docstring); 0: bulk work is never suspended.
    interactive_rows: int = INTERACTIVE_ROWS


@dataclass(eq=False)
class Share:
    """One request's jobs (one ``submit_all``) as admission sees them: fair admission ranks
    requests by priority, rows held and age (module docstring)."""

    priority: Priority
    arrived: float = field(default_factory=time.monotonic)
    taken: int = field(default_factory=lambda: next(_turns))  # the encoder's last turn (arrival at first)
    admitted: int = field(default_factory=lambda: next(_turns))  # the decoder's last turn (arrival at first)
    waiting: collections.deque[Ticket] = field(default_factory=collections.deque)  # to encode, in order
    ready: collections.deque[tuple[Ticket, Encoded]] = field(default_factory=collections.deque)  # to join
    staged: int = 0  # rows being encoded or encoded and waiting to join (changed under the lock)
    running: int = 0  # rows in the batch (changed by the decoding thread only)

    def rank(self, now: float, bulk_wait: float, held: int, turn: int) -> tuple[bool, int, int]:
        """Smallest first: interactive (or bulk that waited ``bulk_wait``), fewest rows ``held``,
        last ``turn`` longest ago."""
        urgent = self.priority is Priority.INTERACTIVE or now - self.arrived >= bulk_wait
        return not urgent, held, turn


@dataclass(eq=False)
class Ticket:
    job: Job
    deadline: float | None  # time.monotonic() value
    share: Share = field(default_factory=lambda: Share(Priority.INTERACTIVE))
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    enqueued: float = field(default_factory=time.monotonic)
    cancelled: bool = False

    def stopped(self, now: float) -> Exception | None:
        """Why this ticket must leave without a result (cancelled, expired), if it must."""
        if self.cancelled:
            return JobCancelled("cancelled")
        if self.deadline is not None and now >= self.deadline:
            return DeadlineExpired("deadline exceeded")
        return None

    @property
    def cost(self) -> int:
        return self.job.k * (len(self.job.src) + self.job.max_len)


class Scheduler:
    def __init__(self, runtime: Runtime, limits: SchedulerLimits, metrics: Metrics | None = None,
                 name: str = "model") -> None:
        self.rt, self.limits, self.metrics, self.name = runtime, limits, metrics, name
        # Requests with jobs waiting to be encoded or staged (being encoded, or encoded and
        # waiting to join), in order of arrival; each request's own jobs are in its Share.
        self._shares: list[Share] = []
        self._cond = threading.Condition()
        self._running: dict[int, Ticket] = {}
        # Bulk jobs taken out of the batch for interactive work, oldest suspension first, with
        # their caches (decoding thread only).
        self._suspended: dict[int, tuple[Ticket, Suspended]] = {}
        self._batch = new_batch(runtime)
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"decode-{name}", daemon=True)
        self._encoder = threading.Thread(target=self._encode_loop, name=f"encode-{name}", daemon=True)
        if metrics:  # read when scraped, so evictions, failures and cancellations show at once
            metrics.in_flight.labels(name).set_function(lambda: self.in_flight)
            metrics.queued.labels(name).set_function(lambda: self.queued)

    def start(self) -> None:
        self._thread.start()
        self._encoder.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._encoder.join(timeout)
        self._thread.join(timeout)

    def submit(self, job: Job, deadline: float | None = None, priority: Priority = Priority.INTERACTIVE) -> Ticket:
        [ticket] = self.submit_all([job], deadline, priority=priority)
        return ticket

    def submit_all(self, jobs: list[Job], deadline: float | None = None,
                   priority: Priority = Priority.INTERACTIVE) -> list[Ticket]:
        """Queue a request's jobs together, or none of them: a request is never left half
        queued when the queue fills up in the middle of it. The jobs are one request for
        fair admission (module docstring)."""
        share = Share(priority)
        tickets = [Ticket(job, deadline, share) for job in jobs]
        for ticket in tickets:
            if ticket.cost > self.limits.max_tokens_in_flight or ticket.job.k > self.limits.max_batch_rows:
                raise ValueError(f"one text needs {ticket.cost} tokens and {ticket.job.k} rows; this server's "
                                 f"limits are {self.limits.max_tokens_in_flight} tokens and "
                                 f"{self.limits.max_batch_rows} rows")
        with self._cond:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if self.queued + len(tickets) > self.limits.max_queue:
                raise QueueFull(f"the queue of model {self.name} is full ({self.limits.max_queue} texts waiting)"
                                if len(tickets) == 1 or not self.queued else
                                f"the queue of model {self.name} has room for {self.limits.max_queue - self.queued}"
                                f" of this request's {len(tickets)} texts")
            share.waiting.extend(tickets)
            if tickets:
                self._shares.append(share)
            self._cond.notify_all()
        return tickets

    def cancel(self, ticket: Ticket) -> None:
        """Mark a ticket cancelled; its rows leave the batch before the next step."""
        ticket.cancelled = True
        with self._cond:
            self._cond.notify_all()

    @property
    def queued(self) -> int:
        """Jobs waiting to join the batch (encoded or not)."""
        return sum(len(s.waiting) + len(s.ready) for s in self._shares)

    @property
    def encoded(self) -> int:
        """Jobs encoded and waiting to join the batch."""
        return sum(len(s.ready) for s in self._shares)

    @property
    def in_flight(self) -> int:
        """Jobs in the batch or suspended from it."""
        return len(self._running) + len(self._suspended)

    @property
    def suspended(self) -> int:
        """Bulk jobs suspended for interactive work."""
        return len(self._suspended)

    # ------------------------------------------------------------ the encoding thread
    def _encode_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    for share in self._shares:
                        self._drop_stopped(share.waiting, now)
                    self._prune()
                    if self._next_to_take(self._staged_rows(), now) is not None:
                        break
                    # Sleep until something changes (every change notifies) or the first
                    # waiting deadline passes: an expired text is answered at its deadline
                    # even while the batch is full.
                    self._cond.wait(self._until_first_deadline())
                if self._stopping:
                    return
                taken = self._take()
            ready = self._encode(taken)
            with self._cond:
                for t, encoded in ready:
                    t.share.ready.append((t, encoded))
                encoded_ids = {t.job.id for t, _ in ready}
                for t in taken:
                    if t.job.id not in encoded_ids:  # failed alone: its rows are no longer staged
                        t.share.staged -= t.job.k
                self._prune()
                self._cond.notify_all()

    def _drop_stopped(self, items: collections.deque, now: float, ticket_of=lambda item: item) -> list[Ticket]:
        """Answer the cancelled and expired among ``items`` (tickets, or entries that
        ``ticket_of`` maps to theirs) and remove them in place, keeping the others' order
        (under the lock). Returns those that left: their places are free at once."""
        kept, gone = [], []
        for item in items:
            t = ticket_of(item)
            if (error := t.stopped(now)) is None:
                kept.append(item)
            else:
                self._resolve(t, error)
                gone.append(t)
        if gone:
            items.clear()
            items.extend(kept)
        return gone

    def _prune(self) -> None:
        """Forget the requests with nothing waiting or staged any more (under the lock)."""
        if not all(s.waiting or s.staged for s in self._shares):
            self._shares = [s for s in self._shares if s.waiting or s.staged]

    def _until_first_deadline(self) -> float | None:
        deadlines = [t.deadline for s in self._shares for t in s.waiting if t.deadline is not None]
        return max(0.0, min(deadlines) - time.monotonic()) + 0.001 if deadlines else None

    def _staged_rows(self) -> int:
        return sum(s.staged for s in self._shares)

    def _next_to_take(self, rows: int, now: float) -> Share | None:
        """The request whose next waiting job the encoder takes, when ``rows`` are staged
        already: the first by rank (rows held counting staged ones), if the stage has room for
        its job; a request that holds no rows at all may use a second batch's rows (under the lock)."""
        waiting = [s for s in self._shares if s.waiting]
        if not waiting:
            return None
        share = min(waiting, key=lambda s: s.rank(now, self.limits.bulk_wait, s.running + s.staged, s.taken))
        room = self.limits.max_batch_rows * (1 if share.running + share.staged else 2)
        return share if rows + share.waiting[0].job.k <= room else None

    def _take(self) -> list[Ticket]:
        """Waiting jobs to encode next, request by request in the order of their rank: up to
        one batch's rows ahead of the decoder (under the lock). Cancelled and expired ones
        leave here."""
        now = time.monotonic()
        rows = self._staged_rows()
        taken: list[Ticket] = []
        while (share := self._next_to_take(rows, now)) is not None:
            t = share.waiting.popleft()
            if (error := t.stopped(now)) is not None:
                self._resolve(t, error)
                continue
            taken.append(t)
            share.staged += t.job.k
            share.taken = next(_turns)
            rows += t.job.k
        return taken

    def _encode(self, tickets: list[Ticket]) -> list[tuple[Ticket, Encoded]]:
        """Encode in length groups; a failing run is retried text by text so that one bad
        text fails alone."""
        if not tickets:
            return []
        by_id = {t.job.id: t for t in tickets}
        try:
            groups = encode_jobs(self.rt, [t.job for t in tickets])
        except Exception:
            groups = []
            for t in tickets:
                try:
                    groups.extend(encode_jobs(self.rt, [t.job]))
                except Exception as e:
                    log.warning("encoder failed on one text (%s); failing it alone", str(e).splitlines()[0])
                    self._resolve(t, JobFailed("the model could not encode this text"))
        # One entry per job (its row of its group's buffers), so that jobs join one by one.
        return [(by_id[j.id], g.take(i)) for g in groups for i, j in enumerate(g.jobs)]

    # ------------------------------------------------------------ the decoding thread
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self.encoded and not self._running and not self._suspended:
                    self._cond.wait()
                if self._stopping:
                    break
            try:
                self._evict()
                self._admit()
                if self._running:
                    self._step()
            except Exception:  # never let the thread die: fail what is running, keep serving
                log.exception("decoding loop error; failing the jobs in flight")
                for t in self._leave(list(self._running), remove=False):
                    self._resolve(t, JobFailed("internal error while decoding"))
                self._batch = new_batch(self.rt)
        self._encoder.join()
        with self._cond:
            left = [*(t for s in self._shares for t in s.waiting), *(t for s in self._shares for t, _ in s.ready),
                    *self._running.values(), *(t for t, _ in self._suspended.values())]
        for t in left:
            self._resolve(t, JobCancelled("the server stopped"))

    def _leave(self, jids: list[int], remove: bool = True) -> list[Ticket]:
        """The running jobs ``jids`` leave the batch (``remove``: their rows too) and give
        back their requests' rows; returns their tickets, in order (decoding thread)."""
        if remove and jids:
            self._batch.remove(set(jids))
        tickets = [self._running.pop(jid) for jid in jids]
        for t in tickets:
            t.share.running -= t.job.k
        return tickets

    def _evict(self) -> None:
        now = time.monotonic()
        stopped = {jid: error for jid, t in self._running.items() if (error := t.stopped(now)) is not None}
        for t in self._leave(list(stopped)):
            self._resolve(t, stopped[t.job.id])
        for jid, (t, _) in list(self._suspended.items()):
            if (error := t.stopped(now)) is not None:
                del self._suspended[jid]
                t.share.running -= t.job.k
                self._resolve(t, error)

    def _suspends(self) -> bool:
        return self.limits.interactive_rows > 0 and hasattr(self._batch, "suspend")

    def _bulk_allowance(self, ready_interactive: int) -> int | None:
        """The rows bulk work may hold now: None when no interactive work runs or is ready to join
        (``ready_interactive`` rows, under the lock), or when this batch never suspends."""
        if not self._suspends():
            return None
        running = sum(t.job.k for t in self._running.values() if t.share.priority is Priority.INTERACTIVE)
        if not running and not ready_interactive:
            return None
        joining = min(ready_interactive, self.limits.max_batch_rows - running)
        return max(0, self.limits.interactive_rows - running - joining)

    def _make_room(self, allowance: int | None) -> None:
        """Suspend the newest bulk jobs in the batch until bulk work holds at most ``allowance``
        rows or one job (decoding thread)."""
        if allowance is None:
            return
        bulk = [t for t in self._running.values() if t.share.priority is Priority.BULK]  # in order of admission
        rows = sum(t.job.k for t in bulk)
        leaving: list[Ticket] = []
        while len(bulk) > 1 and rows > allowance:
            t = bulk.pop()
            leaving.append(t)
            rows -= t.job.k
        if not leaving:
            return
        for t, state in zip(leaving, self._batch.suspend([t.job for t in leaving])):
            del self._running[t.job.id]
            self._suspended[t.job.id] = (t, state)
        if self.metrics:
            self.metrics.suspended.labels(self.name).inc(len(leaving))

    def _resume(self, allowance: int | None) -> None:
        """Suspended bulk jobs rejoin, oldest suspension first, while they fit: the batch's rows
        and tokens, and ``allowance`` bulk rows (or one job) when interactive work runs (decoding thread)."""
        rows = self._batch.n
        tokens = sum(t.cost for t in self._running.values())
        bulk_rows = sum(t.job.k for t in self._running.values() if t.share.priority is Priority.BULK)
        back: list[tuple[Ticket, Suspended]] = []
        for t, state in self._suspended.values():
            k = t.job.k
            if (rows + k > self.limits.max_batch_rows or tokens + t.cost > self.limits.max_tokens_in_flight
                    or (allowance is not None and bulk_rows and bulk_rows + k > allowance)):
                break
            back.append((t, state))
            rows, tokens, bulk_rows = rows + k, tokens + t.cost, bulk_rows + k
        if not back:
            return
        for t, _ in back:  # running before they join: a failing resume fails them with the rest
            del self._suspended[t.job.id]
            self._running[t.job.id] = t
        self._batch.resume([state for _, state in back])

    def _next_to_admit(self, now: float, bulk: bool = True) -> Share | None:
        """The request whose next encoded job joins the batch next: the first by rank, rows
        held counting those in the batch; only interactive ones unless ``bulk`` (under the lock)."""
        ready = [s for s in self._shares if s.ready and (bulk or s.priority is Priority.INTERACTIVE)]
        return min(ready, key=lambda s: s.rank(now, self.limits.bulk_wait, s.running, s.admitted)) if ready else None

    def _admit(self) -> None:
        now = time.monotonic()
        admitted: list[tuple[Ticket, Encoded]] = []
        with self._cond:
            # Whoever was cancelled or expired leaves first, wherever it waits in line.
            left = [t for s in self._shares for t in self._drop_stopped(s.ready, now, ticket_of=lambda entry: entry[0])]
            for t in left:
                t.share.staged -= t.job.k
            allowance = self._bulk_allowance(sum(t.job.k for s in self._shares if s.priority is Priority.INTERACTIVE
                                                 for t, _ in s.ready))
            self._make_room(allowance)
            self._resume(allowance)
            rows = self._batch.n
            tokens = sum(t.cost for t in self._running.values())
            bulk_rows = sum(t.job.k for t in self._running.values() if t.share.priority is Priority.BULK)
            # Job by job from the request that ranks first; the first that does not fit waits
            # for its rows, and nothing passes it. New bulk work waits while bulk jobs are
            # suspended (they rejoin first) and while interactive work leaves it no rows.
            while (share := self._next_to_admit(now, bulk=not self._suspended and (
                    allowance is None or not bulk_rows or bulk_rows < allowance))) is not None:
                t, encoded = share.ready[0]
                if rows + t.job.k > self.limits.max_batch_rows or tokens + t.cost > self.limits.max_tokens_in_flight:
                    break
                if (share.priority is Priority.BULK and allowance is not None and bulk_rows
                        and bulk_rows + t.job.k > allowance):
                    break
                share.ready.popleft()
                share.staged -= t.job.k
                share.running += t.job.k
                share.admitted = next(_turns)
                admitted.append((t, encoded))
                rows += t.job.k
                tokens += t.cost
                bulk_rows += t.job.k if share.priority is Priority.BULK else 0
            if admitted or left:
                # Staged rows were freed, by admission or by jobs that left: the encoder may
                # be asleep waiting for exactly that (a lost wake-up here stranded the queue).
                self._prune()
                self._cond.notify_all()
        if not admitted:
            return
        if self.metrics:
            for t, _ in admitted:
                self.metrics.queue_seconds.observe(now - t.enqueued)
        for t, _ in admitted:  # running before they join: a failing add fails them with the rest
            self._running[t.job.id] = t
        self._batch.add([e for _, e in admitted])

    def _step(self) -> None:
        rows = self._batch.n
        try:
            finished = self._batch.step()
        except Exception as e:
            log.warning("decoder step failed (%s); probing job by job", str(e).splitlines()[0])
            bad = {j.id for j in self._batch.jobs if not self._batch.probe(j)}
            if not bad:  # not reproducible job by job: fail them all rather than loop
                bad = {j.id for j in self._batch.jobs}
            for t in self._leave(sorted(bad)):
                self._resolve(t, JobFailed("the model failed while decoding this text"))
            return
        if self.metrics:
            self.metrics.batch_rows.observe(rows)
            self.metrics.tokens_generated.inc(rows)
        for t in self._leave([j.id for j in finished]):
            self._resolve(t, None)

    def _resolve(self, t: Ticket, error: Exception | None) -> None:
        if t.future.done():
            return
        if error is None:
            t.future.set_result(t.job.result)
        else:
            t.future.set_exception(error)
