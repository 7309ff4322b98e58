"""One scheduler per model: a bounded queue, an encoding thread and a decoding thread
that batches continuously.

gRPC handlers only validate, ``submit`` and await the returned future. The encoding
thread takes waiting jobs off the queue (up to one batch's rows ahead of the decoder)
and encodes them, in length groups, while the decoder runs: the encoder's cost leaves
the decoding loop (it was a quarter of it under 64 single-sentence clients, one small
encoder run per step) and uses a core the decoder leaves idle. The decoding thread, at
every step: evicts cancelled and expired jobs (freeing their rows), admits encoded jobs
while the batch has rows and tokens to spare, runs one decoder step for every row and
resolves the jobs that finished. onnxruntime releases the GIL while it runs, so both
threads and the event loop make progress together.

A failure is confined to the job that caused it: a failing encoder run for several
newcomers is retried one by one, and a failing step is probed job by job, so one bad
item fails alone while the others carry on.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field

from engine.decoding import Encoded, Job, encode_jobs, new_batch
from engine.runtime import Runtime
from server.config import MAX_BATCH_ROWS, MAX_QUEUE, MAX_TOKENS_IN_FLIGHT
from server.metrics import Metrics

log = logging.getLogger("nmt.server")


class QueueFull(Exception):
    """The waiting queue is full: the caller gets RESOURCE_EXHAUSTED at once."""


class DeadlineExpired(Exception):
    """The job's deadline passed before it finished; its rows were freed."""


class JobCancelled(Exception):
    """The caller went away; its rows were freed."""


class JobFailed(Exception):
    """The model failed on this job (the others in its batch were not affected)."""


@dataclass(frozen=True)
class SchedulerLimits:
    max_batch_rows: int = MAX_BATCH_ROWS  # beam rows decoded together in one step
    max_tokens_in_flight: int = MAX_TOKENS_IN_FLIGHT  # sum over running jobs of rows x (source + max output) tokens
    max_queue: int = MAX_QUEUE  # jobs waiting to join the batch


@dataclass(eq=False)
class Ticket:
    job: Job
    deadline: float | None  # time.monotonic() value
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
        self._queue: collections.deque[Ticket] = collections.deque()  # waiting to be encoded
        self._ready: collections.deque[tuple[Ticket, Encoded]] = collections.deque()  # encoded, waiting to join
        self._encoding = 0  # rows being encoded right now
        self._cond = threading.Condition()
        self._running: dict[int, Ticket] = {}
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

    def submit(self, job: Job, deadline: float | None = None) -> Ticket:
        [ticket] = self.submit_all([job], deadline)
        return ticket

    def submit_all(self, jobs: list[Job], deadline: float | None = None) -> list[Ticket]:
        """Queue a request's jobs together, or none of them: a request is never left half
        queued when the queue fills up in the middle of it."""
        tickets = [Ticket(job, deadline) for job in jobs]
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
            self._queue.extend(tickets)
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
        return len(self._queue) + len(self._ready)

    @property
    def in_flight(self) -> int:
        return len(self._running)

    # ------------------------------------------------------------ the encoding thread
    def _encode_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    self._drop_stopped(self._queue, time.monotonic())
                    if self._take_possible():
                        break
                    # Sleep until something changes (every change notifies) or the first
                    # waiting deadline passes: an expired text is answered at its deadline
                    # even while the batch is full.
                    self._cond.wait(self._until_first_deadline())
                if self._stopping:
                    return
                taken = self._take()
                self._encoding = sum(t.job.k for t in taken)
            ready = self._encode(taken)
            with self._cond:
                self._ready.extend(ready)
                self._encoding = 0
                self._cond.notify_all()

    def _drop_stopped(self, items: collections.deque, now: float, ticket_of=lambda item: item) -> bool:
        """Answer the cancelled and expired among ``items`` (tickets, or entries that
        ``ticket_of`` maps to theirs) and remove them in place, keeping the others' order
        (under the lock). True when any left: their places are free at once."""
        kept = []
        for item in items:
            t = ticket_of(item)
            if (error := t.stopped(now)) is None:
                kept.append(item)
            else:
                self._resolve(t, error)
        if len(kept) == len(items):
            return False
        items.clear()
        items.extend(kept)
        return True

    def _until_first_deadline(self) -> float | None:
        deadlines = [t.deadline for t in self._queue if t.deadline is not None]
        return max(0.0, min(deadlines) - time.monotonic()) + 0.001 if deadlines else None

    def _staged_rows(self) -> int:
        return self._encoding + sum(t.job.k for t, _ in self._ready)

    def _take_possible(self) -> bool:
        return bool(self._queue) and self._staged_rows() < self.limits.max_batch_rows

    def _take(self) -> list[Ticket]:
        """Waiting jobs to encode next: up to one batch's rows ahead of the decoder (under
        the lock). Cancelled and expired ones leave here."""
        now = time.monotonic()
        rows = self._staged_rows()
        taken: list[Ticket] = []
        while self._queue and (not taken or rows + self._queue[0].job.k <= self.limits.max_batch_rows):
            t = self._queue.popleft()
            if (error := t.stopped(now)) is not None:
                self._resolve(t, error)
                continue
            taken.append(t)
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
                while not self._stopping and not self._ready and not self._running:
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
                for t in list(self._running.values()):
                    self._resolve(t, JobFailed("internal error while decoding"))
                self._running.clear()
                self._batch = new_batch(self.rt)
        self._encoder.join()
        with self._cond:
            left = [*self._queue, *(t for t, _ in self._ready), *self._running.values()]
        for t in left:
            self._resolve(t, JobCancelled("the server stopped"))

    def _evict(self) -> None:
        now = time.monotonic()
        gone = set()
        for jid, t in self._running.items():
            if (error := t.stopped(now)) is not None:
                self._resolve(t, error)
                gone.add(jid)
        if gone:
            self._batch.remove(gone)
            for jid in gone:
                del self._running[jid]

    def _admit(self) -> None:
        now = time.monotonic()
        rows = self._batch.n
        tokens = sum(t.cost for t in self._running.values())
        admitted: list[tuple[Ticket, Encoded]] = []
        with self._cond:
            # Whoever was cancelled or expired leaves first, wherever it waits in line.
            left = self._drop_stopped(self._ready, now, ticket_of=lambda entry: entry[0])
            while self._ready:
                t, encoded = self._ready[0]
                if rows + t.job.k > self.limits.max_batch_rows or tokens + t.cost > self.limits.max_tokens_in_flight:
                    break
                self._ready.popleft()
                admitted.append((t, encoded))
                rows += t.job.k
                tokens += t.cost
            if admitted or left:
                # Staged rows were freed, by admission or by jobs that left: the encoder may
                # be asleep waiting for exactly that (a lost wake-up here stranded the queue).
                self._cond.notify_all()
        if not admitted:
            return
        if self.metrics:
            for t, _ in admitted:
                self.metrics.queue_seconds.observe(now - t.enqueued)
        self._batch.add([e for _, e in admitted])
        for t, _ in admitted:
            self._running[t.job.id] = t

    def _step(self) -> None:
        rows = self._batch.n
        try:
            finished = self._batch.step()
        except Exception as e:
            log.warning("decoder step failed (%s); probing job by job", str(e).splitlines()[0])
            bad = {j.id for j in self._batch.jobs if not self._batch.probe(j)}
            if not bad:  # not reproducible job by job: fail them all rather than loop
                bad = {j.id for j in self._batch.jobs}
            for jid in bad:
                self._resolve(self._running.pop(jid), JobFailed("the model failed while decoding this text"))
            self._batch.remove(bad)
            return
        if self.metrics:
            self.metrics.batch_rows.observe(rows)
            self.metrics.tokens_generated.inc(rows)
        if finished:
            self._batch.remove({j.id for j in finished})
            for j in finished:
                self._resolve(self._running.pop(j.id), None)

    def _resolve(self, t: Ticket, error: Exception | None) -> None:
        if t.future.done():
            return
        if error is None:
            t.future.set_result(t.job.result)
        else:
            t.future.set_exception(error)
