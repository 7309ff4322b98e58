"""Clients against a real server (in-process, free localhost port) serving a real tiny package."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from cli import free_port
from clients.attention import attention_matrix, draw_attention
from clients.client import (
    FIRST_CONTACT_SECONDS,
    AsyncTranslatorClient,
    Hypothesis,
    RetryPolicy,
    StopReason,
    Translation,
    TranslationError,
    TranslatorClient,
    parse_addresses,
)
from clients.loadtest import main as loadtest_main
from clients.loadtest import percentile
from clients.progress import Progress
from clients.translate_file import FileSettings, FileTranslator, format_translation, split_lines
from clients.translate_file import main as translate_main
from engine.defaults import BEAM_SIZE
from tests.server_harness import TEXTS, ServerThread, priorities_submitted, wait_until

ROOT = Path(__file__).resolve().parents[1]
MAX_CHARS = 300
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def server(tiny_package):
    s = ServerThread(tiny_package, max_chars=MAX_CHARS, max_tokens=64, max_texts=32)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with TranslatorClient(server.address) as c:
        yield c


def texts_received(server: ServerThread) -> float:
    registry = server.running.service.metrics.registry
    return registry.get_sample_value("nmt_texts_total", {"model": "tiny"}) or 0.0



# ---------------------------------------------------------------- the library
def test_translate_keeps_order_and_empty_list_is_empty(client):
    assert client.translate([], "en", "de") == []
    batch = client.translate(TEXTS, "en", "de")  # beam BEAM_SIZE, as everywhere a person does not choose
    assert [t.text for t in batch] == [client.translate([x], "en", "de")[0].text for x in TEXTS]
    greedy = client.translate(TEXTS, "en", "de", beam_size=1)
    assert all(t.hypotheses[0].num_tokens > 0 for t in greedy[:-1])
    with pytest.raises(TypeError, match="not one string"):
        client.translate("Jesus wept.", "en", "de")


def test_errors_carry_code_and_message(client):
    with pytest.raises(TranslationError) as e:
        client.translate(["x"], "en", "fr")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details == "language pair 'en-fr' is not supported by model 'tiny'; supported: en-de, de-en"
    assert e.value.attempts == 1  # not retried


def test_n_best_scores_and_attention(client):
    [t] = client.translate(["Jesus wept."], "en", "de", beam_size=4, num_hypotheses=3, return_scores=True,
                           return_attention=True)
    assert len(t.hypotheses) == 3
    scores = [h.score for h in t.hypotheses]
    assert scores == sorted(scores, reverse=True) and scores[0] < 0
    h = t.hypotheses[0]
    assert h.source_pieces[0] == "<2de>" and h.source_pieces[-1] == "</s>"
    assert attention_matrix(h).shape == (len(h.target_pieces), len(h.source_pieces)) == (h.num_tokens,
                                                                                         len(h.source_pieces))


def test_stream_tags_answers_and_reports_errors_in_band(client):
    batches = [[TEXTS[0]], [], [TEXTS[1], TEXTS[2]], ["x" * (MAX_CHARS + 1)]]
    got = dict(client.translate_stream(batches, "en", "de"))
    assert sorted(got) == [0, 1, 2, 3]
    assert [t.text for t in got[0]] == [client.translate([TEXTS[0]], "en", "de")[0].text]
    assert got[1] == []
    assert len(got[2]) == 2
    assert isinstance(got[3], TranslationError) and got[3].code == grpc.StatusCode.INVALID_ARGUMENT
    assert got[3].details == f"texts[0]: {MAX_CHARS + 1} characters; the limit is {MAX_CHARS}"


def test_list_models(client):
    [m] = client.list_models()
    assert (m.name, list(m.pairs), m.device, m.max_chars_per_text) == ("tiny", ["en-de", "de-en"], "cpu", MAX_CHARS)


def test_round_robin_balances_over_servers(tiny_package, server):
    other = ServerThread(tiny_package)
    try:
        before = (texts_received(server), texts_received(other))
        with TranslatorClient([server.address, other.address]) as c:
            for _ in range(6):
                c.translate(["Jesus wept."], "en", "de")
        assert (texts_received(server) - before[0], texts_received(other) - before[1]) == (3, 3)
    finally:
        other.stop()


def test_unavailable_is_retried_on_the_next_address(server):
    dead = f"127.0.0.1:{free_port()}"
    with TranslatorClient(f"{dead},{server.address}", retry=RetryPolicy(attempts=3, initial_backoff=0.01)) as c:
        [t] = c.translate(["Jesus wept."], "en", "de", timeout=20)
    assert t.text


def test_retries_stop_at_the_deadline():
    dead = f"127.0.0.1:{free_port()}"
    with TranslatorClient(dead, retry=RetryPolicy(attempts=100, initial_backoff=0.05, max_backoff=0.2)) as c:
        start = time.monotonic()
        with pytest.raises(TranslationError) as e:
            c.translate(["x"], "en", "de", timeout=1.0)
        assert time.monotonic() - start < 3.0
    assert e.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert e.value.attempts > 1


def test_resource_exhausted_is_retried(tiny_package):
    busy = ServerThread(tiny_package, max_queue=1, max_batch_rows=1, max_texts=1, max_beam=1)
    singles = [x for x in TEXTS[:6] if x != TEXTS[4]]  # one sentence each: a queue of one holds no more
    try:
        async def go() -> tuple[list, list]:
            async with AsyncTranslatorClient(busy.address, retry=RetryPolicy(attempts=50, initial_backoff=0.02,
                                                                             max_backoff=0.1)) as c, \
                    AsyncTranslatorClient(busy.address, retry=RetryPolicy(attempts=1)) as no_retry:
                retried = await asyncio.gather(*(c.translate([x], "en", "de", timeout=30, beam_size=1)
                                                 for x in singles))
                once = await asyncio.gather(*(no_retry.translate([x], "en", "de", timeout=30, beam_size=1)
                                              for x in singles), return_exceptions=True)
                return retried, once

        retried, once = asyncio.run(go())
        assert all(r[0].text for r in retried)  # every call got through, after retries
        rejected = [e for e in once if isinstance(e, TranslationError)]
        assert rejected and all(e.code == grpc.StatusCode.RESOURCE_EXHAUSTED for e in rejected)
    finally:
        busy.stop()


def test_async_client_equals_sync(server, client):
    async def go():
        async with AsyncTranslatorClient([server.address]) as c:
            one = await c.translate(TEXTS, "en", "de")
            stream = [r async for r in c.translate_stream([[TEXTS[0]], [TEXTS[3]]], "en", "de")]
            models = await c.list_models()
            return one, dict(stream), models

    one, stream, models = asyncio.run(go())
    assert [t.text for t in one] == [t.text for t in client.translate(TEXTS, "en", "de")]
    assert stream[1][0].text == one[3].text
    assert models[0].name == "tiny"


def test_parse_addresses():
    assert parse_addresses(None) == ["127.0.0.1:50051"]
    assert parse_addresses(["a:1,b:2", " c:3 "]) == ["a:1", "b:2", "c:3"]
    with pytest.raises(ValueError, match="no server address"):
        parse_addresses(",")


class _Unavailable(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def test_retry_policy_backs_off_capped_until_the_deadline():
    policy, rng = RetryPolicy(), random.Random(0)
    far = time.monotonic() + 100
    assert 0.05 <= policy.next_delay(_Unavailable(), 1, far, rng) <= 0.1
    waits = [policy.next_delay(_Unavailable(), n, far, rng) for n in range(2, 200)]
    assert all(w is not None and w <= policy.max_backoff for w in waits)  # no attempt limit, only the deadline
    assert max(waits) > policy.max_backoff / 2
    # The last wait is cut so that one more attempt fits; then the call gives up.
    assert policy.next_delay(_Unavailable(), 50, time.monotonic() + 0.5, rng) <= 0.4
    assert policy.next_delay(_Unavailable(), 50, time.monotonic() + 0.05, rng) is None
    assert policy.next_delay(_Unavailable(grpc.StatusCode.RESOURCE_EXHAUSTED), 9, far, rng) is not None
    assert policy.next_delay(_Unavailable(grpc.StatusCode.INVALID_ARGUMENT), 1, far, rng) is None
    assert RetryPolicy(attempts=3).next_delay(_Unavailable(), 3, far, rng) is None
    assert RetryPolicy(attempts=1).next_delay(_Unavailable(), 1, far, rng) is None


def _restart_later(package: Path, port: int, after: float, started: list[ServerThread]) -> threading.Thread:
    def go() -> None:
        time.sleep(after)
        started.append(ServerThread(package, port=port))

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_a_call_rides_out_a_server_restart_within_its_timeout(tiny_package):
    first = ServerThread(tiny_package)
    second: list[ServerThread] = []
    try:
        heard: list[grpc.StatusCode] = []
        with TranslatorClient(first.address, on_retry=lambda e, _: heard.append(e.code)) as c:
            [before] = c.translate(["Jesus wept."], "en", "de")
            first.stop()
            restarter = _restart_later(tiny_package, first.port, 3.0, second)
            start = time.monotonic()
            [after] = c.translate(["Jesus wept."], "en", "de", timeout=15)
            took = time.monotonic() - start
        restarter.join(30)
        assert after == before
        assert 3.0 <= took < 15.0
        assert set(heard) == {grpc.StatusCode.UNAVAILABLE}  # on_retry heard every retry
    finally:
        for s in second:
            s.stop()


# ---------------------------------------------------------------- nmt-translate: files
def test_split_lines_counts_as_wc_does():
    assert split_lines("") == []
    assert split_lines("a\n\nb") == ["a", "", "b"]
    assert split_lines("a\r\nb\r\n") == ["a", "b"]
    assert split_lines("a\u2028b\x0cc\n") == ["a\u2028b\x0cc"]  # only newlines end lines


@pytest.fixture(scope="module")
def big_file(tmp_path_factory, toy_corpus) -> tuple[Path, list[str]]:
    """3,000 lines: verses (short and long), empty and blank lines, unicode, and over-long lines."""
    verses = [line.split("\t")[0] for line in toy_corpus["copy_en"].read_text().splitlines()][:150]
    specials = ["", "   ", "Ünïcödé — “quotes”, 数字 123 and emoji 🙂", "x" * (MAX_CHARS + 50),
                " ".join(["ab"] * 90)]  # too many characters; too many tokens (but few enough characters)
    lines = [(verses + specials)[(i * 7) % (len(verses) + len(specials))] for i in range(3000)]
    path = tmp_path_factory.mktemp("files") / "in.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


@pytest.fixture(scope="module")
def alone(client, big_file) -> dict[str, str]:
    """Each distinct translatable line, translated alone (blank lines are not sent: they stay empty)."""
    out = {}
    for text in {x for x in big_file[1] if x.strip()}:
        with contextlib.suppress(TranslationError):
            out[text] = client.translate([text], "en", "de")[0].text
    return out


def test_file_keeps_lines_order_and_reports_failures(server, big_file, alone, tmp_path, capsys):
    path, lines = big_file
    out = tmp_path / "out.txt"
    rc = translate_main(["-s", "en", "-t", "de", "-i", str(path), "-o", str(out), "--address", server.address,
                         "--batch-lines", "24", "--in-flight", "3"])
    err = capsys.readouterr().err
    assert rc == 3
    got = split_lines(out.read_text(encoding="utf-8"))
    assert len(got) == len(lines) == 3000
    failed = {}
    for row in (tmp_path / "out.txt.errors.tsv").read_text().splitlines():
        n, code, message = row.split("\t")
        failed[int(n)] = (code, message)
    for i, (src, tgt) in enumerate(zip(lines, got)):
        if not src.strip() or i + 1 in failed:
            assert tgt == "", i
        else:
            assert tgt == alone[src], i
    long_chars = [i + 1 for i, x in enumerate(lines) if len(x) > MAX_CHARS]
    long_tokens = [i + 1 for i, x in enumerate(lines) if x.startswith("ab ab")]
    assert sorted(failed) == sorted(long_chars + long_tokens)
    assert failed[long_chars[0]] == ("INVALID_ARGUMENT", f"{MAX_CHARS + 50} characters; the limit is {MAX_CHARS}")
    assert failed[long_tokens[0]][1].endswith("tokens; the limit is 64")
    assert f"{len(failed)} line(s) could not be translated" in err
    assert not (tmp_path / "out.txt.partial").exists()


def test_stdin_to_stdout(server, client):
    lines = [TEXTS[0], "", TEXTS[1]]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "clients.translate_file", "-s", "en", "-t", "de", "-q",
                        "--address", server.address], input="\n".join(lines) + "\n", capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    expected = [client.translate([TEXTS[0]], "en", "de")[0].text, "", client.translate([TEXTS[1]], "en", "de")[0].text]
    assert r.stdout == "\n".join(expected) + "\n"


def kill_9_after(cmd: list[str], partial: Path, lines: int) -> None:
    """Run ``cmd`` and kill -9 it once ``partial`` holds ``lines`` lines (or after 120 s)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.exists() and partial.read_bytes().count(b"\n") >= lines:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_resume_after_kill_translates_only_the_rest(server, big_file, alone, tmp_path):
    path, lines = big_file
    out = tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    cmd = [sys.executable, "-m", "clients.translate_file", "-s", "en", "-t", "de", "-i", str(path), "-o", str(out),
           "--address", server.address, "--batch-lines", "4", "--in-flight", "1", "-q"]
    kill_9_after(cmd, partial, 1000)
    assert not out.exists(), "the run finished before it could be killed"
    done = partial.read_bytes().count(b"\n")
    assert 1000 <= done < 3000
    # Nothing without --resume: the partial output is never clobbered by accident.
    assert translate_main(["-s", "en", "-t", "de", "-i", str(path), "-o", str(out), "--address", server.address,
                           "-q"]) == 2
    before = texts_received(server)
    assert translate_main(["-s", "en", "-t", "de", "-i", str(path), "-o", str(out), "--address", server.address,
                           "--batch-lines", "4", "--resume", "-q"]) == 3
    assert split_lines(out.read_text(encoding="utf-8")) == [alone.get(x, "") for x in lines]
    rest = [x for x in lines[done:] if x.strip() and len(x) <= MAX_CHARS]
    over_tokens = sum(1 for x in rest if x.startswith("ab ab"))
    # Every remaining line once; a batch holding a line over the token limit is rejected whole
    # (and counted by the server), then its lines go again one by one to find the bad one.
    sent = texts_received(server) - before
    assert len(rest) <= sent <= len(rest) + 4 * over_tokens
    assert not partial.exists() and not (tmp_path / "out.txt.partial.json").exists()


def test_resume_refuses_a_different_input(server, tmp_path, capsys):
    a, b, out = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "out.txt"
    a.write_text("Jesus wept.\n")
    b.write_text("Peace be with you.\n")
    (tmp_path / "out.txt.partial").write_text("")
    (tmp_path / "out.txt.partial.json").write_text(json.dumps({"input_sha256": "0" * 64}))
    assert translate_main(["-s", "en", "-t", "de", "-i", str(b), "-o", str(out), "--address", server.address,
                           "--resume"]) == 2
    assert "was made with a different input_sha256, lines" in capsys.readouterr().err


def test_nbest_is_tsv_and_bad_pair_fails_before_sending(server, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("Jesus wept.\n\nPeace be with you.\n")
    out = tmp_path / "out.tsv"
    assert translate_main(["-s", "en", "-t", "de", "-i", str(src), "-o", str(out), "--beam", "4", "--nbest", "2",
                           "--address", server.address, "-q"]) == 0
    rows = out.read_text().split("\n")
    assert len(rows) == 4 and rows[1] == "" and rows[3] == ""
    columns = rows[0].split("\t")  # text, score, stop reason per hypothesis
    assert len(columns) == 6 and float(columns[1]) < 0 and columns[2] in ("end_of_sentence", "length_limit")
    assert translate_main(["-s", "en", "-t", "fr", "-i", str(src), "-o", str(out), "--address", server.address]) == 2
    assert "language pair en-fr is not served by model 'tiny'; it serves: en-de, de-en" in capsys.readouterr().err


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    """A client command as users run it."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


def test_file_mistakes_are_one_line_and_exit_2(tmp_path):
    """Each was a traceback (FileNotFoundError, IsADirectoryError) before; no server is needed to meet them."""
    src = tmp_path / "in.txt"
    src.write_text("Jesus wept.\n")
    cases = [
        (["-i", str(tmp_path / "missing.txt")],
         f"-i/--input: {tmp_path / 'missing.txt'} does not exist; give a UTF-8 text file, one sentence a line"),
        (["-i", str(tmp_path)], f"-i/--input: {tmp_path} is a directory; give a UTF-8 text file, one sentence a line"),
        (["-i", str(src), "-o", str(tmp_path / "no" / "out.txt")],
         f"-o/--output: cannot write {tmp_path / 'no' / 'out.txt'}: the folder {tmp_path / 'no'} does not exist; "
         "create it first"),
        (["-i", str(src), "-o", str(tmp_path)], f"-o/--output: {tmp_path} is a directory; give a file name"),
        (["-i", str(src), "--tls-ca", str(tmp_path / "ca.pem")],
         f"--tls-ca: {tmp_path / 'ca.pem'} does not exist; give a PEM file"),
    ]
    for args, message in cases:
        r = _cli("clients.translate_file", "-s", "en", "-t", "de", *args)
        assert (r.returncode, r.stderr) == (2, f"nmt-translate: error: {message}\n"), args
    for args, message in [
        (["--input", str(tmp_path / "missing.txt")],
         f"-i/--input: {tmp_path / 'missing.txt'} does not exist; give a UTF-8 text file, one sentence a line"),
        (["--input", str(src), "--json", str(tmp_path / "no" / "r.json")],
         f"--json: cannot write {tmp_path / 'no' / 'r.json'}: the folder {tmp_path / 'no'} does not exist; "
         "create it first"),
    ]:
        r = _cli("clients.loadtest", "-s", "en", "-t", "de", *args)
        assert (r.returncode, r.stderr) == (2, f"nmt-loadtest: error: {message}\n"), args


def test_an_unreachable_server_exits_1_in_every_mode(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("Jesus wept.\n")
    address = f"127.0.0.1:{free_port()}"
    hint = f"(is a server running at {address}? pass --address HOST:PORT or set $NMT_ADDRESS)"
    for args in (["Jesus wept."], ["-i", str(src), "-q"]):
        r = _cli("clients.translate_file", "-s", "en", "-t", "de", "--address", address, "--timeout", "0.5", *args)
        last = r.stderr.splitlines()[-1]
        assert r.returncode == 1 and last.startswith("nmt-translate: error: UNAVAILABLE: ") and last.endswith(hint)
    r = _cli("clients.loadtest", "-s", "en", "-t", "de", "--address", address, "--input", str(src))
    last = r.stderr.splitlines()[-1]
    assert r.returncode == 1 and last.startswith("nmt-loadtest: error: the server does not answer: UNAVAILABLE: ")
    assert last.endswith(hint)
    # With the default --timeout (120 s of retries for a server that was reached and went away), a
    # server never reached fails within FIRST_CONTACT_SECONDS, in one line; so does a bad host name.
    for where in (address, "no-such-host.invalid:50051"):
        started = time.monotonic()
        r = _cli("clients.translate_file", "-s", "en", "-t", "de", "--address", where, "Jesus wept.")
        assert r.returncode == 1 and time.monotonic() - started < FIRST_CONTACT_SECONDS + 10, r.stderr
        [line] = r.stderr.splitlines()
        assert line.startswith("nmt-translate: error: UNAVAILABLE: ") and where in line


def test_loadtest_checks_the_pair_before_sending_anything(server, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("Jesus wept.\n")
    r = _cli("clients.loadtest", "-s", "en", "-t", "fr", "--address", server.address, "--input", str(src),
             "--duration", "1", "--warmup", "0")
    assert (r.returncode, r.stderr.splitlines()[-1]) == (
        2, "nmt-loadtest: error: language pair en-fr is not served by model 'tiny'; it serves: en-de, de-en")


def test_language_codes_are_case_insensitive_and_a_bad_pair_is_2_in_both_modes(server, tmp_path, capsys):
    assert translate_main(["-s", "en", "-t", "de", "--address", server.address, "Jesus wept."]) == 0
    lower = capsys.readouterr().out
    assert translate_main(["-s", "EN", "-t", "De", "--address", server.address, "Jesus wept."]) == 0
    assert capsys.readouterr().out == lower
    assert translate_main(["-s", "en", "-t", "fr", "--address", server.address, "Jesus wept."]) == 2
    assert capsys.readouterr().err == ("nmt-translate: error: language pair en-fr is not served by model 'tiny'; "
                                       "it serves: en-de, de-en\n")
    src = tmp_path / "in.txt"
    src.write_text("Jesus wept.\n")
    assert translate_main(["-s", "EN", "-t", "FR", "-i", str(src), "--address", server.address, "-q"]) == 2
    assert capsys.readouterr().err == ("nmt-translate: error: language pair en-fr is not served by model 'tiny'; "
                                       "it serves: en-de, de-en\n")


def test_progress_shows_no_rate_or_eta_before_it_means_something():
    import io

    p = Progress(3000, stream=io.StringIO())
    t0 = p.start
    assert p.line(t0 + 0.1) == "0/3000 lines (0%), 0s"  # was: "0.0 lines/s" at 0 lines
    p.update(done=64, counted=128)
    assert p.line(t0 + 1.0) == "64/3000 lines (2%), 1s"  # was: an eta from one early batch
    assert p.line(t0 + 4.0) == "64/3000 lines (2%), 32.0 lines/s, 4s"  # a rate, but 2% done is no basis for an eta
    p.update(done=236, counted=200)
    assert p.line(t0 + 5.0) == "300/3000 lines (10%), 65.6 lines/s, 5s, eta 45s"
    p.update(done=2700, counted=2672)
    assert p.line(t0 + 9.0, final=True) == "3000/3000 lines (100%), 333.3 lines/s, 9s"
    short = Progress(3, stream=io.StringIO())  # a job done in one go still reports its rate at the end
    short.update(done=3, counted=3)
    assert short.line(short.start + 0.05, final=True) == "3/3 lines (100%), 60.0 lines/s, 0s"


def _as_left_by_a_kill(d: Path, lines: list[str], partial: str, errors: str) -> Path:
    """in.txt, and what a killed run leaves next to out.txt: the partial output, its description
    and the errors so far. Returns in.txt."""
    d.mkdir()
    raw = ("\n".join(lines) + "\n").encode()
    (d / "in.txt").write_bytes(raw)
    (d / "out.txt.partial").write_text(partial)
    (d / "out.txt.partial.json").write_text(json.dumps(
        {"input_sha256": hashlib.sha256(raw).hexdigest(), "lines": len(lines), "source": "en", "target": "de",
         "model": "", "beam_size": BEAM_SIZE, "nbest": 1, "max_output_tokens": 0, "split": True}))
    (d / "out.txt.errors.tsv").write_text(errors)
    return d / "in.txt"


def test_resume_keeps_the_earlier_failures_once_and_exits_3(server, client, tmp_path, capsys):
    row2 = f"2\tINVALID_ARGUMENT\t{MAX_CHARS + 1} characters; the limit is {MAX_CHARS}\n"
    lines = [TEXTS[0], "x" * (MAX_CHARS + 1), TEXTS[5], TEXTS[2], TEXTS[1], TEXTS[3]]
    want = [client.translate([x], "en", "de")[0].text if len(x) <= MAX_CHARS else "" for x in lines]
    # Only the killed run had a failure: the exit status still says so, and the list keeps it.
    src = _as_left_by_a_kill(tmp_path / "a", lines, "\n".join(want[:3]) + "\n", row2)
    out = tmp_path / "a" / "out.txt"
    assert translate_main(["-s", "en", "-t", "de", "-i", str(src), "-o", str(out), "--address", server.address,
                           "--resume", "-q"]) == 3
    assert (tmp_path / "a" / "out.txt.errors.tsv").read_text() == row2
    assert split_lines(out.read_text(encoding="utf-8")) == want
    capsys.readouterr()

    # Failures before and after the point of the kill. The partial output has 3 complete
    # lines and a torn 4th; the errors list has line 2 twice, a row of a line past the partial
    # output (its line is translated again) and a torn row.
    lines[4] = "x" * (MAX_CHARS + 2)
    want[4] = ""
    src = _as_left_by_a_kill(tmp_path / "b", lines, "\n".join(want[:3]) + "\n" + want[3][:2],
                             row2 + row2 + "5\tINVALID_ARGUMENT\tfrom the killed run\n2\tINV")
    out = tmp_path / "b" / "out.txt"
    rc = translate_main(["-s", "en", "-t", "de", "-i", str(src), "-o", str(out), "--address", server.address,
                         "--resume"])
    err = capsys.readouterr().err
    assert rc == 3
    assert split_lines(out.read_text(encoding="utf-8")) == want
    assert (tmp_path / "b" / "out.txt.errors.tsv").read_text() == \
        row2 + f"5\tINVALID_ARGUMENT\t{MAX_CHARS + 2} characters; the limit is {MAX_CHARS}\n"
    assert "resuming: 3 of 6 lines already done (1 of them failed, listed in" in err
    assert "2 line(s) could not be translated" in err


def test_failures_survive_kill_9_and_resume_lists_each_once(server, big_file, alone, tmp_path):
    lines = big_file[1][:1000]
    src, out, partial = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "out.txt.partial"
    errors = tmp_path / "out.txt.errors.tsv"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    failed = [i + 1 for i, x in enumerate(lines) if len(x) > MAX_CHARS or x.startswith("ab ab")]
    cmd = [sys.executable, "-m", "clients.translate_file", "-s", "en", "-t", "de", "-i", str(src), "-o", str(out),
           "--address", server.address, "--batch-lines", "4", "--in-flight", "2", "-q"]
    kill_9_after(cmd, partial, 250)
    assert not out.exists(), "the run finished before it could be killed"
    done = partial.read_bytes().count(b"\n")
    assert 250 <= done < len(lines) and failed[0] < done
    listed = [int(row.split("\t")[0]) for row in errors.read_text().splitlines()]
    # Every failure up to the partial output's end was listed as it happened (rows run ahead of
    # the partial output by at most what was not yet flushed when the run died).
    assert listed == [n for n in failed if n <= listed[-1]] and listed[-1] >= max(n for n in failed if n <= done)
    assert translate_main(["-s", "en", "-t", "de", "-i", str(src), "-o", str(out), "--address", server.address,
                           "--batch-lines", "4", "--resume", "-q"]) == 3
    assert [int(row.split("\t")[0]) for row in errors.read_text().splitlines()] == failed
    assert split_lines(out.read_text(encoding="utf-8")) == [alone.get(x, "") for x in lines]


class _Recording:
    """A real AsyncTranslatorClient that logs each answer as ("answered", line indices). With
    ``hold_first``, the first call's answer is held back until the others have stopped for that
    many seconds (at most 10 s)."""

    def __init__(self, client: AsyncTranslatorClient, lines: list[str], log: list, hold_first: float = 0.0) -> None:
        self.client, self.log, self.hold_first = client, log, hold_first
        self.index = {x: i for i, x in enumerate(lines)}
        self.calls = 0

    async def translate(self, texts, *args, **kwargs):
        self.calls += 1
        first = self.calls == 1
        try:
            result = await self.client.translate(texts, *args, **kwargs)
        except TranslationError:
            if len(texts) == 1:  # a line that failed for good is done too
                self.log.append(("answered", [self.index[texts[0]]]))
            raise
        end, seen = time.monotonic() + 10, -1
        while first and self.hold_first and len(self.log) != seen and time.monotonic() < end:
            seen = len(self.log)
            await asyncio.sleep(self.hold_first)
        self.log.append(("answered", [self.index[x] for x in texts]))
        return result


def _replay(log: list, n: int) -> int:
    """Check that lines were emitted in order, and each as soon as the lines before it were
    done: before the next answer is logged. Returns the most lines held (done, not emitted)."""
    done: set[int] = set()
    emitted = held = 0
    for kind, what in log:
        if kind == "emit":
            assert what == emitted
            emitted += 1
            continue
        ready = emitted
        while ready in done:
            ready += 1
        assert emitted == ready, f"lines {emitted}..{ready - 1} were done but not written"
        held = max(held, len(done) - emitted)
        done.update(what)
    assert emitted == n == len(done)
    return held


def _run_file_translator(server: ServerThread, lines: list[str], job: FileSettings, hold_first: float = 0.0,
                         ahead: int | None = None) -> tuple[list, FileTranslator]:
    log: list = []

    async def go() -> FileTranslator:
        async with AsyncTranslatorClient(server.address) as c:
            translator = FileTranslator(_Recording(c, lines, log, hold_first), job, MAX_CHARS, 32, ahead=ahead)
            await translator.run(lines, 0, lambda i, t, f: log.append(("emit", i)), Progress(0, enabled=False))
            return translator

    return log, asyncio.run(go())


@pytest.fixture(scope="module")
def verses(toy_corpus) -> list[str]:
    """Distinct short verses."""
    rows = [line.split("\t")[0] for line in toy_corpus["copy_en"].read_text().splitlines()]
    return [x for x in dict.fromkeys(rows) if len(x) <= MAX_CHARS]


def test_a_batch_split_line_by_line_writes_each_line_as_soon_as_it_can(server, verses):
    over_tokens = " ".join(["ab"] * 90)  # few enough characters, too many tokens: the server rejects its batch
    lines = [*verses[:2], over_tokens, *verses[2:30], over_tokens + " ab", *verses[30:60]]
    log, translator = _run_file_translator(server, lines, FileSettings("en", "de", batch_lines=8, in_flight=2))
    _replay(log, len(lines))
    assert [(f.line, f.code) for f in translator.failures] == [(3, "INVALID_ARGUMENT"), (32, "INVALID_ARGUMENT")]
    assert translator.failures[0].message.endswith("tokens; the limit is 64")


def test_finished_lines_held_in_memory_are_bounded(server, verses):
    """The first batch is slow to answer: the others run ahead, but start no batch 16 or more
    lines past it; then they wait."""
    lines = verses[:120]
    log, translator = _run_file_translator(server, lines, FileSettings("en", "de", batch_lines=4, in_flight=3),
                                           hold_first=1.0, ahead=16)
    assert _replay(log, len(lines)) == translator.most_held == 12  # lines 5-16 waited for lines 1-4


def test_file_client_rides_out_a_server_restart(tiny_package, big_file, alone, tmp_path, capsys):
    """The server goes away in the middle of a file and is back 3 s later: the run goes on."""
    first = ServerThread(tiny_package)
    lines = [x for x in big_file[1] if x in alone][:600]
    src, out, partial = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "out.txt.partial"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    second: list[ServerThread] = []
    stopped_at: list[int] = []

    def stop_then_restart() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (partial.exists() and partial.read_bytes().count(b"\n") >= 100):
            time.sleep(0.01)
        first.stop()
        stopped_at.append(partial.read_bytes().count(b"\n") if partial.exists() else -1)
        time.sleep(3.0)
        second.append(ServerThread(tiny_package, port=first.port))

    thread = threading.Thread(target=stop_then_restart, daemon=True)
    thread.start()
    try:
        rc = translate_main(["-s", "en", "-t", "de", "-i", str(src), "-o", str(out), "--address", first.address,
                             "--batch-lines", "4", "--in-flight", "2", "--timeout", "20", "-q"])
        thread.join(30)
        assert rc == 0, capsys.readouterr().err
        assert "; retrying until the --timeout of 20 s is used up" in capsys.readouterr().err
        assert 100 <= stopped_at[0] < len(lines), "the server stopped before the run began or after it ended"
        assert split_lines(out.read_text(encoding="utf-8")) == [alone[x] for x in lines]
    finally:
        for s in second:
            s.stop()


# ---------------------------------------------------------------- the bearer token
@pytest.fixture(scope="module")
def guarded(tiny_package):
    s = ServerThread(tiny_package, auth_token="s3cret")
    yield s
    s.stop()


def test_token_from_a_file_or_the_environment(guarded, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NMT_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("NMT_TOKEN", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    cmd = ["-s", "en", "-t", "de", "--address", guarded.address, "Jesus wept."]
    assert translate_main(cmd) == 1
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    assert translate_main([*cmd, "--auth-token-file", str(token_file)]) == 0
    assert translate_main([*cmd, "--auth-token", "s3cret"]) == 0
    assert translate_main([*cmd, "--token", "s3cret"]) == 0
    capsys.readouterr()
    (tmp_path / "empty").write_text("\n")
    assert translate_main([*cmd, "--auth-token-file", str(tmp_path / "empty")]) == 2
    assert translate_main([*cmd, "--auth-token-file", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "must hold the token on one line" in err and "cannot read" in err
    with pytest.raises(SystemExit) as e:
        translate_main([*cmd, "--auth-token-file", str(token_file), "--auth-token", "s3cret"])
    assert e.value.code == 2
    monkeypatch.setenv("NMT_AUTH_TOKEN", "s3cret")
    assert translate_main(cmd) == 0
    assert translate_main([*cmd, "--auth-token", "wrong"]) == 1  # the flag wins over the environment

    monkeypatch.delenv("NMT_AUTH_TOKEN")
    src = tmp_path / "s.txt"
    src.write_text("Jesus wept.\n")
    report = tmp_path / "r.json"
    assert loadtest_main(["--address", guarded.address, "-s", "en", "-t", "de", "--input", str(src),
                          "--concurrency", "1", "--duration", "0.3", "--warmup", "0", "--json", str(report),
                          "--auth-token-file", str(token_file)]) == 0
    assert json.loads(report.read_text())["levels"][0]["errors"] == {}
    assert "s3cret" not in report.read_text()


def test_help_says_where_the_token_can_come_from():
    from clients.loadtest import build_parser as loadtest_parser
    from clients.translate_file import build_parser as translate_parser

    for parser in (translate_parser(), loadtest_parser()):
        text = " ".join(parser.format_help().split())
        assert "--auth-token-file PATH" in text and "$NMT_AUTH_TOKEN" in text
        assert "--auth-token TOKEN the bearer token itself. Visible to other users of this machine in the process " \
               "list" in text
        assert "--token" not in text  # its old name: still accepted (tests/test_cli.py), no longer shown


def test_format_translation():
    assert format_translation(None, 1) == ""
    t = Translation((Hypothesis("Jesus weinte.", -0.5, stop_reason=StopReason.END_OF_SENTENCE),
                     Hypothesis("Jesus\tweinte", -2.25, stop_reason=StopReason.LENGTH_LIMIT)))
    assert format_translation(t, 1) == "Jesus weinte."
    assert format_translation(t, 2) == "Jesus weinte.\t-0.5000\tend_of_sentence\tJesus weinte\t-2.2500\tlength_limit"


# ---------------------------------------------------------------- sentences and stop reasons
def test_translations_expose_sentences_and_stop_reasons(client):
    text = "Jesus wept.  In the beginning was the Word.\n"
    [t] = client.translate([text], "en", "de")
    assert [(s.source, s.start, s.end) for s in t.segments] == [("Jesus wept.", 0, 11),
                                                                ("In the beginning was the Word.", 13, 43)]
    assert t.text == f"{t.segments[0].text}  {t.segments[1].text}\n"
    assert all(s.hypotheses[0].stop_reason is StopReason.END_OF_SENTENCE for s in t.segments)
    assert not t.length_limited
    [cut] = client.translate([text], "en", "de", max_output_tokens=2)
    assert cut.length_limited and cut.hypotheses[0].stop_reason is StopReason.LENGTH_LIMIT
    assert [s.hypotheses[0].num_tokens for s in cut.segments] == [2, 2]
    [whole] = client.translate([text], "en", "de", no_sentence_split=True)
    assert [(s.source, s.start, s.end) for s in whole.segments] == [(text.strip(), 0, 43)]
    [blank] = client.translate(["  "], "en", "de")
    assert (blank.text, blank.segments, blank.hypotheses[0].stop_reason) == ("  ", (), StopReason.UNSPECIFIED)


def test_a_one_sentence_segment_carries_the_attention_the_server_sends_once(client):
    [t] = client.translate(["Jesus wept."], "en", "de", return_attention=True)
    [seg] = t.segments
    assert seg.hypotheses[0].attention == t.hypotheses[0].attention != ()
    assert seg.hypotheses[0].source_pieces == t.hypotheses[0].source_pieces


def test_nmt_translate_reports_lines_stopped_by_the_length_limit(server, tmp_path, capsys):
    src, out = tmp_path / "in.txt", tmp_path / "out.tsv"
    src.write_text("Jesus wept.\n\nIn the beginning was the Word, and the Word was with God.\n")
    assert translate_main(["-s", "en", "-t", "de", "-i", str(src), "-o", str(out), "--max-output-tokens", "2",
                           "--beam", "2", "--nbest", "2", "--address", server.address, "-q"]) == 0
    err = capsys.readouterr().err
    assert "nmt-translate: 2 line(s) stopped at the output-length limit and may be cut short (line 1, 3); " \
           "raise --max-output-tokens" in err
    rows = out.read_text().split("\n")
    assert rows[1] == "" and rows[0].split("\t")[2] == "length_limit"
    assert translate_main(["-s", "en", "-t", "de", "--address", server.address, "Jesus wept."]) == 0
    assert "output-length limit" not in capsys.readouterr().err
    assert translate_main(["-s", "en", "-t", "de", "--address", server.address, "--max-output-tokens", "1",
                           "Jesus wept.", "Amen."]) == 0
    assert "2 text(s) stopped at the output-length limit and may be cut short (text 1, 2)" in capsys.readouterr().err


# ---------------------------------------------------------------- attention maps
def test_attention_png_has_the_matrix_shape(server, tmp_path, capsys):
    png = tmp_path / "attn.png"
    assert translate_main(["-s", "en", "-t", "de", "--address", server.address, "--attention-png", str(png),
                           "Jesus wept."]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    [t] = TranslatorClient(server.address).translate(["Jesus wept."], "en", "de", return_attention=True)
    h = t.hypotheses[0]
    assert f"({h.num_tokens} target x {len(h.source_pieces)} source pieces)" in capsys.readouterr().err
    m = draw_attention(h, tmp_path / "again.png")
    assert m.shape == (h.num_tokens, len(h.source_pieces))
    assert abs(float(m.sum(axis=1).mean()) - 1.0) < 1e-3  # each target piece's weights sum to one


# ---------------------------------------------------------------- nmt-loadtest
def test_percentile_nearest_rank():
    values = [float(x) for x in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 90), percentile(values, 99), percentile(values, 100)) == \
        (50.0, 90.0, 99.0, 100.0)
    assert percentile([], 50) == 0.0


def test_loadtest_sweep_writes_json_and_png(server, tmp_path):
    src = tmp_path / "sentences.txt"
    src.write_text("\n".join(TEXTS[:-1]) + "\n")
    out_json, out_png = tmp_path / "load.json", tmp_path / "load.png"
    start = time.monotonic()
    rc = loadtest_main(["--address", server.address, "-s", "en", "-t", "de", "--input", str(src),
                        "--concurrency", "1,4", "--rate", "20", "--duration", "1.5", "--warmup", "0.3",
                        "--json", str(out_json), "--png", str(out_png)])
    assert rc == 0
    assert time.monotonic() - start < 30
    report = json.loads(out_json.read_text())
    levels = report["levels"]
    assert [(r["mode"], r["level"]) for r in levels] == [("closed", 1), ("closed", 4), ("open", 20)]
    for r in levels:
        assert r["requests"] > 0 and r["sentences_per_s"] > 0 and r["target_tokens_per_s"] > 0
        assert 0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p90"] <= r["latency_ms"]["p99"] <= r["latency_ms"]["max"]
        assert r["errors"] == {}
    assert out_png.read_bytes()[:8] == PNG_MAGIC


def test_loadtest_plot_title_counts_the_requests_not_the_corpus():
    import argparse

    from clients.loadtest import LevelResult, plot_title

    results = [LevelResult("closed", 1, requests=40), LevelResult("open", 5.0, requests=12)]
    args = argparse.Namespace(source="en", target="de", texts_per_request=1)
    assert plot_title(args, results) == "nmt-loadtest en->de: 52 requests in 2 level(s)"
    args.texts_per_request = 4
    assert plot_title(args, results) == "nmt-loadtest en->de: 52 requests of 4 texts in 2 level(s)"


def test_clients_need_neither_training_nor_torch():
    """The clients depend on the gRPC contract and light libraries: the load tester reads the
    bundled test split through corpus/bible.py, not training/ (which pulls torch)."""
    code = ("import sys\n"
            "import clients.attention, clients.client, clients.loadtest, clients.translate_file\n"
            "from clients.loadtest import bundled_sentences\n"
            "print(len(bundled_sentences('en-de')))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('training', 'torch', 'export', 'server')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["879", "[]"]  # John, one verse a line; no heavy package imported


def test_loadtest_names_a_pair_the_bundled_split_lacks():
    from cli import UsageError
    from clients.loadtest import bundled_sentences

    with pytest.raises(UsageError, match=r"the bundled test split has no en-it .*pass --input FILE"):
        bundled_sentences("en-it")


def test_loadtest_stops_within_max_total(server, tmp_path):
    src = tmp_path / "s.txt"
    src.write_text("Jesus wept.\n")
    start = time.monotonic()
    rc = loadtest_main(["--address", server.address, "-s", "en", "-t", "de", "--input", str(src),
                        "--concurrency", "1,2,3,4", "--duration", "1", "--warmup", "0", "--max-total", "2.5",
                        "--json", str(tmp_path / "r.json")])
    assert rc == 0
    assert time.monotonic() - start < 10
    assert len(json.loads((tmp_path / "r.json").read_text())["levels"]) in (2, 3)


# ---------------------------------------------------------------- started together, pointed wrong, run twice, disk full
def test_a_command_started_while_its_server_loads_waits_for_it(tiny_package, monkeypatch, capsys):
    """A server answers ListModels, with no model, from the moment it listens until its models are
    loaded and warmed up: nmt-translate started right after nmt-serve said "the server has no model
    loaded" (exit 2). It waits for them within --timeout; past it, it says the server is still
    loading (exit 1: run it again as it is)."""
    import server.main as server_main
    from server.config import ServerConfig

    gate = threading.Event()  # warm-up waits for it: the test decides when the models are in
    real_warm_up = server_main.warm_up

    def held_warm_up(model) -> None:
        gate.wait(60)
        real_warm_up(model)

    monkeypatch.setattr(server_main, "warm_up", held_warm_up)
    port = free_port()
    address = f"127.0.0.1:{port}"
    cfg = ServerConfig(model=(f"tiny={tiny_package}",), host="127.0.0.1", port=port, device="cpu", threads=1,
                       int8=False, metrics_port=-1)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    starting = asyncio.run_coroutine_threadsafe(server_main.build_server(cfg), loop)
    try:
        with TranslatorClient(address) as c:
            assert c.list_models(timeout=60) == []  # listening, and loading
        assert translate_main(["-s", "en", "-t", "de", "--address", address, "--timeout", "1", "Jesus wept."]) == 1
        assert capsys.readouterr().err == (
            "nmt-translate: the server is loading its models; waiting up to 1 s\n"
            "nmt-translate: error: UNAVAILABLE: the server is still loading its models (waited 1 s for it to be "
            "ready)\n")
        threading.Timer(1.0, gate.set).start()
        assert translate_main(["-s", "en", "-t", "de", "--address", address, "Jesus wept."]) == 0
        out, err = capsys.readouterr()
        assert err.splitlines()[0] == "nmt-translate: the server is loading its models; waiting up to 120 s"
        assert "error" not in err
        with TranslatorClient(address) as c:
            assert out == c.translate(["Jesus wept."], "en", "de")[0].text + "\n"
    finally:
        gate.set()
        running = starting.result(120)
        asyncio.run_coroutine_threadsafe(running.drain(1.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_the_gateway_s_port_is_named_an_http_server(capsys):
    """nmt-translate pointed at nmt-http's port asked "is a server running at ...?" while one was:
    an HTTP server, answering in HTTP/1.1. It says so, and where the gRPC server usually is."""
    from gateway.config import GatewayConfig
    from tests.gateway_harness import GatewayThread

    gateway = GatewayThread(GatewayConfig(grpc_address=f"127.0.0.1:{free_port()}"))
    try:
        rc = translate_main(["-s", "en", "-t", "de", "--address", f"127.0.0.1:{gateway.port}", "Jesus wept."])
    finally:
        gateway.stop()
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nmt-translate")]
    assert (rc, said) == (1, [f"nmt-translate: error: 127.0.0.1:{gateway.port} is an HTTP server (the gateway?); the "
                              "gRPC server usually listens on 50051: pass --address HOST:50051 or set $NMT_ADDRESS"])


def test_a_second_run_on_the_same_output_is_refused_naming_the_first(server, tmp_path, capsys):
    """`nmt-translate -o c.out` and, while it ran, the same with --resume both appended to
    c.out.partial. The first run holds c.out.lock; the second is refused in one line naming it."""
    out, lock = tmp_path / "c.out", tmp_path / "c.out.lock"
    src = tmp_path / "in.txt"
    src.write_text("Jesus wept.\nPeace be with you.\n")
    # The first run reads its input from a pipe the test holds open: it runs (holding the lock) until
    # the test writes the lines.
    first = subprocess.Popen([sys.executable, "-m", "clients.translate_file", "-s", "en", "-t", "de", "-i", "-",
                              "-o", str(out), "-q", "--address", server.address], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    try:
        wait_until(lambda: lock.exists() and lock.read_text().startswith(f"pid {first.pid}, started "))
        holder = lock.read_text().strip()
        second = ["-s", "en", "-t", "de", "-i", str(src), "-o", str(out), "--resume", "-q", "--address",
                  server.address]
        assert translate_main(second) == 2
        assert capsys.readouterr().err == (f"nmt-translate: error: another nmt-translate run is writing {out} "
                                           f"({holder}); wait for it to end, or stop it, before running this\n")
        assert not (tmp_path / "c.out.partial").exists()  # the refused run wrote nothing
        _, err = first.communicate(src.read_text(), timeout=60)
        assert first.returncode == 0, err
    finally:
        first.kill()
    first_output = out.read_text()
    assert len(split_lines(first_output)) == 2 and not lock.exists()
    # A lock file left by a run that was killed holds no lock: the next run goes ahead.
    lock.write_text("pid 1, started 2000-01-01 00:00:00\n")
    assert translate_main([*second[:-4], "--overwrite", "-q", "--address", server.address]) == 0
    assert out.read_text() == first_output and not lock.exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_disk_ends_in_one_line_naming_the_file_and_resume(server, tmp_path, capsys):
    """A full disk ended in a 36-line chained ENOSPC traceback. Now one line: the file, the reason,
    and --resume; exit 1. (c.out.partial is a link to /dev/full, where every write fails with ENOSPC.)"""
    src = tmp_path / "in.txt"
    src.write_text("Jesus wept.\nPeace be with you.\n")
    out = tmp_path / "c.out"
    (tmp_path / "c.out.partial").symlink_to("/dev/full")
    rc = translate_main(["-s", "en", "-t", "de", "-i", str(src), "-o", str(out), "--overwrite", "-q", "--address",
                         server.address])
    assert (rc, capsys.readouterr().err) == (
        1, f"nmt-translate: error: cannot write {out}.partial: No space left on device; the lines finished so far "
           f"are in {out}.partial: make room and run the same command with --resume to translate the rest\n")
    assert not out.exists() and not (tmp_path / "c.out.lock").exists()
    with open("/dev/full", "w") as full:  # standard output on a full disk: one line, no traceback at exit
        r = subprocess.run([sys.executable, "-m", "clients.translate_file", "-s", "en", "-t", "de", "-i", str(src),
                            "-q", "--address", server.address], stdout=full, stderr=subprocess.PIPE, text=True,
                           cwd=ROOT, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert (r.returncode, r.stderr) == (1, "nmt-translate: error: cannot write to standard output: No space left "
                                           "on device\n")


def test_a_file_is_sent_as_bulk_work_and_texts_on_the_command_line_as_interactive(server, tmp_path, capsys):
    from server.scheduler import Priority

    with priorities_submitted(server.scheduler) as seen:
        (tmp_path / "in.txt").write_text(f"{TEXTS[0]}\n{TEXTS[1]}\n", encoding="utf-8")
        assert translate_main(["-s", "en", "-t", "de", "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"),
                               "--address", server.address, "-q"]) == 0
        assert seen and set(seen) == {Priority.BULK}
        seen.clear()
        assert translate_main(["-s", "en", "-t", "de", "--address", server.address, TEXTS[0]]) == 0
        assert seen == [Priority.INTERACTIVE]
    capsys.readouterr()
