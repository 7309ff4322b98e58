"""The sentence cache (server/cache.py): its key, its bound, sentences in flight decoded once,
and, against a real server with the tiny model, a cached answer equal to a fresh one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import types
import urllib.request

import numpy as np
import pytest

from cli.settings import ConfigError
from engine.decoding import DecodeOptions, Hypothesis, Job, StopReason
from server.cache import ENTRY_OVERHEAD, KEYED_FIELDS, STATE_FIELDS, SentenceCache, job_key, used
from server.config import CACHE_BYTES, ServerConfig, parse_args
from server.scheduler import Priority
from tests.server_harness import TEXTS, ServerThread, request, submitted

CPU, CUDA = types.SimpleNamespace(device="cpu"), types.SimpleNamespace(device="cuda")


def job(src=(5, 6, 3), **changes) -> Job:
    return Job(list(src), changes.pop("options", DecodeOptions()), **{"max_len": 10, "bos": 2, "eos": 3, "pad": 0,
                                                                      **changes})


def hypotheses(j: Job, attention: bool = False) -> list[Hypothesis]:
    """A stand-in decode: the source reversed."""
    att = np.full((len(j.src), len(j.src)), 0.5, dtype=np.float32) if attention else None
    return [Hypothesis(j.src[::-1], -1.25, att, StopReason.END_OF_SENTENCE)]


# ---------------------------------------------------------------- the key
def test_the_key_covers_every_field_of_a_job_that_decides_its_answer():
    assert {f.name for f in dataclasses.fields(Job)} == {*KEYED_FIELDS, *STATE_FIELDS}
    base = job()
    key = job_key("m", base)
    assert job_key("m", job()) == key  # another job (another id) for the same work
    changed = {"src": [5, 7, 3], "max_len": 11, "bos": 1, "eos": 4, "pad": 1, "prefix": (9,), "banned": (8,),
               "options": DecodeOptions(beam_size=2)}
    assert set(changed) == set(KEYED_FIELDS)
    keys = {name: job_key("m", dataclasses.replace(base, **{name: value})) for name, value in changed.items()}
    options = [DecodeOptions(n_best=2), DecodeOptions(alpha=0.7), DecodeOptions(min_len=1),
               DecodeOptions(attention=True)]
    keys |= {repr(o): job_key("m", dataclasses.replace(base, options=o)) for o in options}
    keys["model"] = job_key("m2", base)
    assert len({key, *keys.values()}) == len(keys) + 1


def test_used_where_decoding_is_batch_invariant_unless_told():
    assert used("auto", CACHE_BYTES, CPU) and not used("auto", CACHE_BYTES, CUDA)
    assert used("on", CACHE_BYTES, CUDA) and not used("off", CACHE_BYTES, CPU)
    assert not used("auto", 0, CPU) and not used("on", 0, CUDA)


def test_flags_are_checked():
    assert ServerConfig().cache == "auto" and ServerConfig().cache_bytes == CACHE_BYTES
    assert parse_args(["--model", "x", "--cache-bytes", "0", "--cache", "on"]).cache_bytes == 0
    with pytest.raises(ConfigError, match=r"^--cache is 'sometimes'; it must be auto, on or off$"):
        ServerConfig(cache="sometimes")
    with pytest.raises(ConfigError, match=r"^--cache-bytes is -1; give a size in bytes, or 0 to turn the cache off$"):
        ServerConfig(cache_bytes=-1)


# ---------------------------------------------------------------- the bound
def test_bounded_in_bytes_least_recently_used_out_first():
    jobs = [job((5, i, 3)) for i in range(10, 14)]
    keys = [job_key("m", j) for j in jobs]
    probe = SentenceCache(1 << 20)
    probe.put(keys[0], hypotheses(jobs[0]))
    size = probe.bytes
    assert size > ENTRY_OVERHEAD and probe.entries == 1
    cache = SentenceCache(3 * size)
    for k, j in zip(keys[:3], jobs):
        cache.put(k, hypotheses(j))
    assert cache.get(keys[0]) == hypotheses(jobs[0])  # now the most recently used
    cache.put(keys[3], hypotheses(jobs[3]))
    assert (cache.entries, cache.bytes) == (3, 3 * size)
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is not None and cache.get(keys[2]) is not None
    cache.put(job_key("m", job((5,) * 200)), hypotheses(job((5,) * 200)))  # larger than the whole cache
    assert cache.entries == 3 and cache.bytes <= cache.max_bytes


def test_a_stored_answer_cannot_be_changed_through_what_get_returns():
    j = job()
    cache = SentenceCache(1 << 20)
    cache.put(job_key("m", j), hypotheses(j, attention=True))
    got = cache.get(job_key("m", j))
    assert got is not None
    got[0].tokens.append(99)
    with pytest.raises(ValueError):
        got[0].attention[0, 0] = 1.0
    [again] = cache.get(job_key("m", j)) or []
    assert again.tokens == [3, 6, 5] and again.score == -1.25 and again.attention is not None


# ---------------------------------------------------------------- sentences in flight
class Decoder:
    """A submit function that holds its answers until ``release``; counts the jobs it was given."""

    def __init__(self, fail: bool = False) -> None:
        self.given: list[int] = []
        self.gate = asyncio.Event()
        self.fail = fail

    async def __call__(self, jobs: list[Job]) -> list[list[Hypothesis]]:
        self.given.append(len(jobs))
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("the leader's request failed")
        return [hypotheses(j) for j in jobs]


async def _two_requests(leader: Decoder, follower: Decoder, first: Priority, second: Priority,
                        deadline: float | None = None) -> tuple[list, list]:
    cache = SentenceCache(1 << 20)
    a = asyncio.create_task(cache.decode("m", "id", [job()], leader, first, None))
    await asyncio.sleep(0)
    b = asyncio.create_task(cache.decode("m", "id", [job()], follower, second, deadline))
    await asyncio.sleep(0)
    follower.gate.set()
    leader.gate.set()
    got = await asyncio.gather(a, b, return_exceptions=True)
    return got[0], got[1]


def test_a_sentence_in_flight_is_decoded_once_for_every_request_that_sends_it():
    leader, follower = Decoder(), Decoder()
    a, b = asyncio.run(_two_requests(leader, follower, Priority.INTERACTIVE, Priority.INTERACTIVE))
    assert a == b == [hypotheses(job())] and (leader.given, follower.given) == ([1], [])
    # Bulk work waits for an interactive request's decode, never the other way round.
    leader, follower = Decoder(), Decoder()
    asyncio.run(_two_requests(leader, follower, Priority.INTERACTIVE, Priority.BULK))
    assert (leader.given, follower.given) == ([1], [])
    leader, follower = Decoder(), Decoder()
    asyncio.run(_two_requests(leader, follower, Priority.BULK, Priority.INTERACTIVE))
    assert (leader.given, follower.given) == ([1], [1])


def test_a_request_whose_leader_fails_decodes_its_sentence_itself():
    leader, follower = Decoder(fail=True), Decoder()
    a, b = asyncio.run(_two_requests(leader, follower, Priority.INTERACTIVE, Priority.INTERACTIVE))
    assert isinstance(a, RuntimeError) and b == [hypotheses(job())]
    assert (leader.given, follower.given) == ([1], [1])


def test_a_sentence_repeated_within_a_request_is_decoded_once():
    async def run() -> tuple[list, list[int]]:
        decoder = Decoder()
        decoder.gate.set()
        got = await SentenceCache(1 << 20).decode("m", "id", [job(), job((7, 3)), job()], decoder,
                                                  Priority.INTERACTIVE, None)
        return got, decoder.given
    got, given = asyncio.run(run())
    assert given == [2] and got == [hypotheses(job()), hypotheses(job((7, 3))), hypotheses(job())]


# ---------------------------------------------------------------- a real server
@pytest.fixture(scope="module")
def cached(tiny_package):
    """The served default: int8 graphs on the CPU, the cache on (auto)."""
    s = ServerThread(tiny_package, int8=True, cache=ServerConfig().cache, max_texts=16)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def fresh(tiny_package):
    s = ServerThread(tiny_package, int8=True, cache="off", max_texts=16)
    yield s
    s.stop()


def jobs_submitted(scheduler) -> contextlib.AbstractContextManager[list]:
    """How many jobs ``scheduler`` is given while the block runs, one count per request."""
    return submitted(scheduler, lambda jobs, options: len(jobs))


def metric(server: ServerThread, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{server.running.metrics_port}/metrics", timeout=5).read()
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_a_cached_answer_equals_a_fresh_one_exactly(cached, fresh):
    """Tokens, texts, scores, stop reasons, pieces and attention: the whole response, beam 4 with
    three hypotheses and greedy, with the cache (missed, then hit) and without it."""
    for options in ({"beam_size": 4, "num_hypotheses": 3, "return_scores": True, "return_attention": True},
                    {"return_scores": True}):
        for direction in ({"src": "en", "tgt": "de"}, {"src": "de", "tgt": "en"}):
            texts = [*TEXTS, "Jesus wept. Jesus wept."]  # the last: one sentence twice, decoded once
            hits, misses = (metric(cached, f'nmt_cache_{name}_total{{model="tiny"}}') for name in ("hits", "misses"))
            with jobs_submitted(cached.scheduler) as first:
                missed = cached.stub().Translate(request(*texts, **direction, **options))
            hits1, misses1 = (metric(cached, f'nmt_cache_{name}_total{{model="tiny"}}') - before
                              for name, before in (("hits", hits), ("misses", misses)))
            with jobs_submitted(cached.scheduler) as second:
                hit = cached.stub().Translate(request(*texts, **direction, **options))
            without = fresh.stub().Translate(request(*texts, **direction, **options))
            assert missed == hit == without
            assert misses1 == sum(first) >= len(texts) - 1 and hits1 >= 1 and second == []
            assert metric(cached, 'nmt_cache_misses_total{model="tiny"}') == misses + misses1
            assert metric(cached, 'nmt_cache_hits_total{model="tiny"}') == hits + 2 * hits1 + misses1
            assert [len(t.hypotheses) for t in hit.translations] == [options.get("num_hypotheses", 1)] * len(texts)
    assert metric(cached, "nmt_cache_entries") > 0 and metric(cached, "nmt_cache_bytes") > 0


def test_every_option_that_changes_the_answer_misses(cached):
    text = "The light shines in the darkness."
    variations = [{}, {"beam_size": 2}, {"beam_size": 2, "num_hypotheses": 2}, {"beam_size": 2, "length_penalty": 1.5},
                  {"max_output_tokens": 5}, {"return_attention": True}]
    for options in variations:
        with jobs_submitted(cached.scheduler) as seen:
            cached.stub().Translate(request(text, **options))
        assert seen == [1], options
    with jobs_submitted(cached.scheduler) as seen:
        cached.stub().Translate(request(text, src="de", tgt="en"))  # another direction: another target tag
        cached.stub().Translate(request(text, return_scores=True))  # the scores are always kept: a hit
    assert seen == [1]


def test_identical_requests_at_once_decode_each_sentence_once(cached, fresh):
    texts = ["He said to them, come and see.", "They came and saw where he was staying."]
    with jobs_submitted(cached.scheduler) as seen, concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: cached.stub().Translate(request(*texts, beam_size=4)), range(8)))
    assert sum(seen) == len(texts)
    assert all(a == answers[0] for a in answers) and answers[0] == fresh.stub().Translate(request(*texts, beam_size=4))


def test_without_the_cache_every_sentence_is_decoded(fresh):
    with jobs_submitted(fresh.scheduler) as seen:
        for _ in range(2):
            fresh.stub().Translate(request("Jesus wept. Jesus wept."))
    assert seen == [2, 2] and metric(fresh, "nmt_cache_entries") == 0
