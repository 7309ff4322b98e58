"""Clients against a real server (in-process, free localhost port) serving a real tiny package."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from clients.attention import attention_matrix, draw_attention
from clients.client import (
    AsyncTranslatorClient,
    RetryPolicy,
    TranslationError,
    TranslatorClient,
    parse_addresses,
)
from clients.loadtest import main as loadtest_main
from clients.loadtest import percentile
from clients.translate_file import format_translation, split_lines
from clients.translate_file import main as translate_main
from tests.server_harness import TEXTS, ServerThread

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- the library
def test_translate_keeps_order_and_empty_list_is_empty(client):
    assert client.translate([], "en", "de") == []
    batch = client.translate(TEXTS, "en", "de")
    assert [t.text for t in batch] == [client.translate([x], "en", "de")[0].text for x in TEXTS]
    assert all(t.hypotheses[0].num_tokens > 0 for t in batch[:-1])
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
    busy = ServerThread(tiny_package, max_queue=1, max_batch_rows=1)
    try:
        async def go() -> tuple[list, list]:
            async with AsyncTranslatorClient(busy.address, retry=RetryPolicy(attempts=50, initial_backoff=0.02,
                                                                             max_backoff=0.1)) as c, \
                    AsyncTranslatorClient(busy.address, retry=RetryPolicy(attempts=1)) as no_retry:
                retried = await asyncio.gather(*(c.translate([x], "en", "de", timeout=30) for x in TEXTS[:6]))
                once = await asyncio.gather(*(no_retry.translate([x], "en", "de", timeout=30) for x in TEXTS[:6]),
                                            return_exceptions=True)
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
    """Each distinct translatable line, translated alone."""
    out = {}
    for text in set(big_file[1]):
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


def test_resume_after_kill_translates_only_the_rest(server, big_file, alone, tmp_path):
    path, lines = big_file
    out = tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    cmd = [sys.executable, "-m", "clients.translate_file", "-s", "en", "-t", "de", "-i", str(path), "-o", str(out),
           "--address", server.address, "--batch-lines", "4", "--in-flight", "1", "-q"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.exists() and partial.read_bytes().count(b"\n") >= 1000:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
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
    assert len(rows[0].split("\t")) == 4 and float(rows[0].split("\t")[1]) < 0
    assert translate_main(["-s", "en", "-t", "fr", "-i", str(src), "-o", str(out), "--address", server.address]) == 2
    assert "language pair en-fr is not served by model 'tiny'; it serves: en-de, de-en" in capsys.readouterr().err


def test_format_translation():
    assert format_translation(None, 1) == ""


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
