"""The scheduler's threads against a real tiny model: nothing waits forever."""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Iterator

import pytest

from engine.decoding import DecodeOptions, Job
from engine.defaults import BOS_ID, EOS_ID, PAD_ID
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from server.metrics import Metrics
from server.scheduler import DeadlineExpired, JobCancelled, Scheduler, SchedulerLimits
from tests.server_harness import wait_until


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
        wait_until(lambda: len(s._ready) == 2)
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
        wait_until(lambda: len(s._ready) == 1)
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
