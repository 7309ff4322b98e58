"""The scheduler's threads against a real tiny model: nothing waits forever."""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Iterator

import pytest

from engine.decoding import DecodeOptions, Job, decode_all
from engine.defaults import BOS_ID, EOS_ID, PAD_ID
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from nmt.v1 import translator_pb2 as pb
from server.metrics import Metrics
from server.scheduler import DeadlineExpired, JobCancelled, Priority, Scheduler, SchedulerLimits, Ticket
from tests.server_harness import TEXTS, ServerThread, priorities_submitted, request, wait_until


@pytest.fixture(scope="module", params=["off", "on"], ids=["host-caches", "resident-caches"])
def runtime(tiny_package, request):
    """Every scheduler test runs over both batches: caches in host memory, and device-resident
    (engine/decoding.py ResidentBatch, here with CPU onnxruntime values)."""
    return Runtime(ModelPackage.load(tiny_package), RuntimeOptions(device="cpu", threads=1, resident=request.param))


@contextlib.contextmanager
def running_scheduler(runtime: Runtime, metrics: Metrics | None = None, **limits) -> Iterator[Scheduler]:
    s = Scheduler(runtime, SchedulerLimits(**limits), metrics, "tiny")
    s.start()
    try:
        yield s
    finally:
        s.stop()


# What a decoder step costs at least in the tests that need a batch kept full for a while: 250
# steps then hold their rows for half a second or more on any CPU. Without it the tiny model's
# two 250-token jobs took 32 ms (greedy) to 98 ms (beam 4, device-resident) on a fast CPU, less
# than the deadlines the tests set, and the batch was free again before they passed.
STEP_DELAY = 0.002


@contextlib.contextmanager
def slow_steps(runtime: Runtime, seconds: float = STEP_DELAY) -> Iterator[None]:
    """Every decoder step of ``runtime`` (host-memory or device-resident) takes ``seconds`` longer."""

    def slowed(run):
        def slow(*args, **kwargs):
            time.sleep(seconds)
            return run(*args, **kwargs)
        return slow

    runtime.step, runtime.run_step = slowed(runtime.step), slowed(runtime.run_step)
    try:
        yield
    finally:
        del runtime.step, runtime.run_step  # the class's methods again


def job(length: int = 0, beam: int = 1) -> Job:
    """A job on a short source; ``length`` > 0 forces exactly that many output tokens."""
    options = DecodeOptions(beam_size=beam, n_best=1, min_len=length)
    return Job([4, 10, 11, 12, 3], options, max_len=length or 20, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)


def test_jobs_waiting_behind_expired_staged_jobs_are_picked_up(runtime):
    """The lost wake-up: jobs encoded and waiting to join a full batch expire while another
    waits in the queue behind them; they left without waking the encoder, which slept on as
    if the batch were still full, so the waiting job was never picked up (it hung until
    another request came, however idle the server)."""
    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=2, max_queue=8) as s:
        running = [s.submit(job(250)) for _ in range(2)]  # fill the batch for a while
        wait_until(lambda: s.in_flight == 2)
        staged = [s.submit(job(), deadline=time.monotonic() + 0.03) for _ in range(2)]
        waiting = s.submit(job())  # no deadline: waits in the queue behind the staged rows
        for t in staged:
            with pytest.raises(DeadlineExpired):
                t.future.result(timeout=10)
        for t in running:
            assert t.future.result(timeout=10)
        assert waiting.future.result(timeout=10)[0].tokens  # hung forever before the fix
        wait_until(lambda: s.in_flight == 0 and s.queued == 0)


def test_cancelled_staged_jobs_free_their_rows_for_the_queue(runtime):
    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=2, max_queue=8) as s:
        running = [s.submit(job(250)) for _ in range(2)]
        wait_until(lambda: s.in_flight == 2)
        staged = [s.submit(job(250)) for _ in range(2)]
        wait_until(lambda: s.encoded == 2)
        waiting = s.submit(job())
        for t in running + staged:
            s.cancel(t)
        for t in running + staged:
            with pytest.raises(JobCancelled):
                t.future.result(timeout=10)
        assert waiting.future.result(timeout=10)


def test_a_waiting_job_expires_at_its_deadline_while_the_batch_is_full(runtime):
    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=8, max_queue=8) as s:
        busy = [s.submit(job(250, beam=4)) for _ in range(2)]
        wait_until(lambda: s.in_flight == 2)
        s.submit(job(250, beam=4))  # staged
        wait_until(lambda: s.encoded == 1)
        start = time.monotonic()
        waiting = s.submit(job(), deadline=start + 0.05)
        with pytest.raises(DeadlineExpired):
            waiting.future.result(timeout=10)
        # Answered at its deadline, not when the batch frees up.
        assert time.monotonic() - start < 0.05 + 0.05
        assert not any(t.future.done() for t in busy)


def test_in_flight_and_queue_gauges_return_to_zero_after_cancellations(runtime):
    metrics = Metrics()

    def gauge(name: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"model": "tiny"})

    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=4, max_queue=8, metrics=metrics) as s:
        tickets = [s.submit(job(250)) for _ in range(6)]
        # Both gauges at once (read in one poll: on a loaded machine a separate read after the
        # first could come after the first four jobs finished).
        wait_until(lambda: (s.in_flight, gauge("nmt_in_flight_sequences"), gauge("nmt_queued_texts")) == (4, 4, 2))
        for t in tickets:
            s.cancel(t)
        concurrent.futures.wait([t.future for t in tickets], timeout=10)
        assert all(isinstance(t.future.exception(), JobCancelled) for t in tickets)
        wait_until(lambda: s.in_flight == 0)
        assert gauge("nmt_in_flight_sequences") == 0  # stayed at 4 before: set only after a step
        assert gauge("nmt_queued_texts") == 0


# ------------------------------------------------------------ fair admission
def finishing_order(*requests: list[Ticket]) -> list[tuple[int, int]]:
    """Wait for every ticket and return (request index, job index) in the order they were
    resolved (by the decoding thread, one at a time)."""
    order: list[tuple[int, int]] = []
    for r, tickets in enumerate(requests):
        for i, t in enumerate(tickets):
            t.future.add_done_callback(lambda _, key=(r, i): order.append(key))
    concurrent.futures.wait([t.future for tickets in requests for t in tickets], timeout=120)
    assert len(order) == sum(map(len, requests))
    return order


def test_a_one_sentence_request_is_not_held_behind_another_requests_bulk_work(runtime):
    """The issue: a one-sentence request sent just after a 1,024-sentence one finished with
    it (admission was first in, first out). The 40 bulk jobs take 10 turns of the batch (each
    job 20 steps); the single sentence joins when the first rows free up, so it finishes
    while most of the bulk request still waits, and it decodes what it decodes alone."""
    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=4, max_queue=64) as s:
        bulk = s.submit_all([job(20) for _ in range(40)], priority=Priority.BULK)
        wait_until(lambda: s.in_flight == 4)
        done_before = sum(t.future.done() for t in bulk)
        single = s.submit(job())
        order = finishing_order(bulk, [single])
    position = order.index((1, 0))
    # Before it: what had finished when it came, the jobs running then (one turn of the batch),
    # and at most two more turns (a loaded machine may run a few steps before it is sent).
    assert position <= done_before + 12, (position, done_before)
    assert len(order) - position >= 20  # first in, first out: it came last
    assert single.future.result()[0].tokens == decode_all(runtime, [job()])[0][0].tokens


def test_requests_of_one_priority_share_the_batch_in_turns(runtime):
    """Two requests of the same priority, the second sent while the first holds the batch:
    their jobs alternate once the first's running jobs finish (round robin), instead of the
    second's starting after the first's last."""
    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=2, max_queue=64) as s:
        first = s.submit_all([job(10) for _ in range(12)])
        wait_until(lambda: s.in_flight == 2)
        second = s.submit_all([job(10) for _ in range(12)])
        order = finishing_order(first, second)
    firsts = [i for i, (r, _) in enumerate(order) if r == 0]
    seconds = [i for i, (r, _) in enumerate(order) if r == 1]
    assert seconds[0] < firsts[5]  # FIFO: 12
    assert firsts[-1] > seconds[5]  # FIFO: the first request's last job before any of the second's
    # Each request's own jobs finish in their order (equal lengths, taken in order).
    assert [i for r, i in order if r == 0] == list(range(12))


def test_interactive_work_joins_before_bulk_work_that_came_first(runtime):
    """A bulk request holds the batch; another bulk request, then an interactive one, arrive.
    The interactive one joins first; among equals the older would have."""
    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=2, max_queue=64) as s:
        busy = s.submit_all([job(10) for _ in range(4)], priority=Priority.BULK)
        wait_until(lambda: s.in_flight == 2)
        later_bulk = s.submit_all([job(10) for _ in range(4)], priority=Priority.BULK)
        interactive = s.submit_all([job(10)], priority=Priority.INTERACTIVE)
        order = finishing_order(busy, later_bulk, interactive)
    assert order.index((2, 0)) < order.index((1, 0))


def test_bulk_work_waits_at_most_its_bound_behind_interactive_work(runtime):
    """An interactive request of many jobs keeps the one-row batch busy; a bulk job sent after
    it ranks as interactive once it has waited ``bulk_wait`` and then gets the next turn,
    instead of waiting for every interactive job (which it does with an unbounded wait)."""
    for bulk_wait, joins_early in ((0.05, True), (float("inf"), False)):
        with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=1, max_queue=64,
                                                    bulk_wait=bulk_wait) as s:
            interactive = s.submit_all([job(30) for _ in range(8)], priority=Priority.INTERACTIVE)
            wait_until(lambda: s.in_flight == 1)
            bulk = s.submit_all([job(5)], priority=Priority.BULK)
            order = finishing_order(interactive, bulk)
        assert (order.index((1, 0)) <= 3) is joins_early, order


def test_a_beam_job_that_waits_for_rows_is_not_passed_by_one_row_jobs(runtime):
    """Rows free up one at a time; the beam-4 job ranked first waits until four are free,
    and the one-row jobs of another request do not take them one by one before it."""
    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=4, max_queue=64) as s:
        busy = [s.submit(job(10 + 5 * i)) for i in range(4)]  # rows free up one at a time
        wait_until(lambda: s.in_flight == 4)
        beam = s.submit_all([job(10, beam=4)])
        singles = s.submit_all([job(10) for _ in range(8)])
        order = finishing_order(busy, beam, singles)
    assert order.index((1, 0)) < order.index((2, 0))


def test_a_requests_priority_goes_from_the_wire_to_the_scheduler(tiny_package):
    """Through the server: a bulk request (PRIORITY_BULK) of 32 texts holds the 4-row batch; a
    one-sentence request sent after it (no priority: interactive) is answered while the bulk
    one is still being decoded."""
    server = ServerThread(tiny_package, max_batch_rows=4, max_beam=4)
    try:
        scheduler = server.scheduler
        stub = server.stub()
        with priorities_submitted(scheduler) as seen, slow_steps(scheduler.rt):
            bulk = stub.Translate.future(pb.TranslateRequest(texts=[TEXTS[1]] * 32, source_lang="en", target_lang="de",
                                                             priority=pb.PRIORITY_BULK), timeout=120)
            wait_until(lambda: scheduler.in_flight == 4)
            single = stub.Translate(request(TEXTS[0]), timeout=60)
            assert not bulk.done()
            assert len(bulk.result().translations) == 32
        assert single.translations[0].hypotheses[0].text
        assert seen == [Priority.BULK, Priority.INTERACTIVE]
    finally:
        server.stop()


# ------------------------------------------------------------ bulk rows suspended for interactive work
@contextlib.contextmanager
def step_rows(runtime: Runtime) -> Iterator[list[int]]:
    """The rows of every decoder step of ``runtime`` (host-memory batches), in order."""
    seen: list[int] = []
    wrapped = vars(runtime).get("step")  # slow_steps' wrapper, if any
    inner = runtime.step

    def record(input_ids, *args, **kwargs):
        seen.append(len(input_ids))
        return inner(input_ids, *args, **kwargs)

    runtime.step = record
    try:
        yield seen
    finally:
        if wrapped is None:
            del runtime.step
        else:
            runtime.step = wrapped


def test_interactive_work_decodes_in_small_steps_beside_a_full_bulk_batch(runtime):
    """Eight bulk jobs of 250 tokens fill the batch; an interactive one arrives. With
    ``interactive_rows`` 2 it joins at once, seven bulk jobs are suspended and the steps hold
    two rows until it is done; then they rejoin before new bulk work and every job decodes what
    it decodes alone. With 0 it waits for the bulk jobs' rows, as before. Device-resident
    batches never suspend."""
    resident = runtime.resident
    for interactive_rows in (2, 0):
        metrics = Metrics()
        with slow_steps(runtime), step_rows(runtime) as rows, running_scheduler(
                runtime, metrics, max_batch_rows=8, max_queue=64, interactive_rows=interactive_rows) as s:
            bulk = s.submit_all([job(250) for _ in range(8)], priority=Priority.BULK)  # busy for 0.5 s or more
            wait_until(lambda: s.in_flight == 8)
            later = s.submit_all([job(5) for _ in range(4)], priority=Priority.BULK)
            interactive = s.submit_all([job(10)])
            order = finishing_order(bulk, interactive, later)
            wait_until(lambda: s.in_flight == 0)
        suspended = metrics.registry.get_sample_value("nmt_suspended_total", {"model": "tiny"})
        first_later = min(order.index((2, i)) for i in range(4))
        if interactive_rows and not resident:
            assert order.index((1, 0)) == 0 and suspended == 7
            # Ten steps of two rows (the interactive job and one bulk job), then all seven
            # suspended jobs rejoin at once, before any later bulk job.
            small = rows.index(2)
            assert rows[small:small + 10] == [2] * 10 and rows[small + 10] == 8, rows
            assert first_later > order.index((0, 0))  # it joins in the row the unsuspended job frees
        else:
            assert order.index((1, 0)) > 0 and not suspended and 2 not in rows[:20]
        for t in [*bulk, *interactive, *later]:
            assert t.future.result()[0].tokens == decode_all(runtime, [t.job])[0][0].tokens


def test_a_suspended_job_that_is_cancelled_or_expires_leaves_at_once(runtime):
    """A suspended bulk job's caller goes away, another's deadline passes: both are answered at
    once, not when the interactive work that displaced them is done."""
    if runtime.resident:
        pytest.skip("device-resident batches do not suspend")
    with slow_steps(runtime, 0.01), running_scheduler(runtime, max_batch_rows=4, max_queue=64,
                                                      interactive_rows=1) as s:  # 250 steps: 2.5 s or more
        start = time.monotonic()
        kept = s.submit(job(250), priority=Priority.BULK)  # bulk work always keeps one job in the batch
        cancelled = s.submit(job(250), priority=Priority.BULK)
        expiring = s.submit(job(250), deadline=start + 1.0, priority=Priority.BULK)
        wait_until(lambda: s.in_flight == 3)
        interactive = s.submit(job(250))
        wait_until(lambda: s.suspended == 2)
        s.cancel(cancelled)
        with pytest.raises(JobCancelled):
            cancelled.future.result(timeout=10)
        with pytest.raises(DeadlineExpired):
            expiring.future.result(timeout=10)
        assert time.monotonic() - start < 1.0 + 0.5 and not interactive.future.done()
        assert s.suspended == 0 and s.in_flight == 2
        for t in (interactive, kept):
            assert t.future.result(timeout=60)[0].tokens == decode_all(runtime, [job(250)])[0][0].tokens


def test_bulk_work_keeps_one_job_in_the_batch_while_interactive_work_takes_every_row(runtime):
    """Bulk jobs run; a stream of interactive jobs arrives and takes every row it can (7 of 8)
    for longer than the bulk work needs (7 turns of 40 steps; the bulk jobs need 60 each).
    Bulk work keeps one job in the batch and, whenever a row frees up, a suspended job
    rejoins: the bulk request finishes before the stream ends, with no age bound to help it
    (``bulk_wait`` infinite)."""
    if runtime.resident:
        pytest.skip("device-resident batches do not suspend")
    with slow_steps(runtime), running_scheduler(runtime, max_batch_rows=8, max_queue=64, interactive_rows=4,
                                                bulk_wait=float("inf")) as s:
        bulk = s.submit_all([job(60) for _ in range(3)], priority=Priority.BULK)
        wait_until(lambda: s.in_flight == 3)
        interactive = s.submit_all([job(40) for _ in range(48)])
        wait_until(lambda: s.suspended == 2)
        order = finishing_order(bulk, interactive)
    assert max(order.index((0, i)) for i in range(3)) < order.index((1, 47))
    for t in bulk:
        assert t.future.result()[0].tokens == decode_all(runtime, [job(60)])[0][0].tokens
