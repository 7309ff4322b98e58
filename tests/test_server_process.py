"""The server as users run it (a subprocess), and behaviours that need their own server:
drain on SIGTERM, start-up errors, device fallback, a full queue, failures confined to
one item, TLS and bearer tokens."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import onnxruntime as ort
import pytest
import sentencepiece as spm
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cli import free_port
from engine.cpu import int8_variant
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from nmt.v1 import translator_pb2 as pb
from nmt.v1 import translator_pb2_grpc as pb_grpc
from server import child
from server.config import METRICS_PORT, ServerConfig
from server.main import warm_up
from server.metrics import Metrics, MetricsServer
from server.scheduler import Scheduler, SchedulerLimits
from server.service import STOPPED, LoadedModel, RequestLimits
from tests.server_harness import ServerThread, code_and_details, request, wait_until

ROOT = Path(__file__).resolve().parents[1]
LONG = "All things were made through him. Without him was not anything made that has been made."



def start(package: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    # No sentence cache: these tests make load by sending the same texts (tests/test_cache.py has it on).
    proc = subprocess.Popen([sys.executable, "-m", "server.main", "--model", f"tiny={package}", "--host", "127.0.0.1",
                             "--port", str(port), "--metrics-port", "-1", "--threads", "1", "--cache", "off",
                             *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, port


def wait_serving(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    try:
        child.wait_serving(f"127.0.0.1:{port}", timeout, proc.poll)
    except child.NotServing as e:
        raise AssertionError(f"{e}: {proc.stderr.read() if proc.poll() is not None else ''}") from None


def test_sigterm_drains_in_flight_work_and_exits_zero(tiny_package):
    metrics_port = free_port()
    # A grace longer than the work, which took 20-43 s on a 2-core machine shared with other work.
    proc, port = start(tiny_package, "--grace-seconds", "90", "--metrics-port", str(metrics_port),
                       "--metrics-host", "127.0.0.1")
    try:
        wait_serving(port, proc)
        stub = pb_grpc.TranslatorStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        # Seconds of work (LONG unsplit, as one long sentence); the signal comes once the server
        # holds a good part of it waiting, so work is in flight whatever this machine's speed.
        in_flight = [stub.Translate.future(request(*["He said,", LONG] * 32, beam_size=8, max_output_tokens=200,
                                                   no_sentence_split=True))
                     for _ in range(12)]
        end = time.monotonic() + 30
        while _metric(metrics_port, "nmt_texts_total{") < 12 * 64:  # every request accepted
            assert time.monotonic() < end, "the work never arrived"
            time.sleep(0.01)
        assert _metric(metrics_port, "nmt_queued_texts{") > 0  # and some of it still waiting
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(grpc.RpcError) as err:  # new work while draining
            stub.Translate(request("Jesus wept."), timeout=5)
        assert (err.value.code(), err.value.details()) == (grpc.StatusCode.UNAVAILABLE,
                                                           "the server is shutting down; retry elsewhere")
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
            health_pb2.HealthCheckResponse.NOT_SERVING
        for call in in_flight:  # in-flight work finishes
            assert [len(t.hypotheses) for t in call.result(timeout=120).translations] == [1] * 64
        assert proc.wait(timeout=30) == 0
        assert "draining" in proc.stderr.read()
    finally:
        proc.kill()


def test_lameduck_keeps_serving_new_work_after_sigterm_then_refuses_it(tiny_package):
    """--lameduck-seconds: after SIGTERM health says NOT_SERVING at once, new work is still
    answered for that long (a balancer that re-resolves names every few seconds may still send
    some), then refused with UNAVAILABLE; the process exits 0."""
    proc, port = start(tiny_package, "--lameduck-seconds", "4", "--grace-seconds", "5")
    try:
        wait_serving(port, proc)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = pb_grpc.TranslatorStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + 10
        while health.Check(health_pb2.HealthCheckRequest(), timeout=5).status != \
                health_pb2.HealthCheckResponse.NOT_SERVING:
            assert time.monotonic() < end, "health never said NOT_SERVING"
            time.sleep(0.02)
        signalled = time.monotonic()
        answer = stub.Translate(request("Jesus wept."), timeout=10)  # inside the lame-duck period
        assert time.monotonic() - signalled < 4, "this machine is too slow for the test's timing"
        assert len(answer.translations) == 1 and answer.translations[0].hypotheses
        with pytest.raises(grpc.RpcError) as err:  # then new work is refused
            while True:
                stub.Translate(request("Jesus wept."), timeout=10)
                assert time.monotonic() < signalled + 15, "new work was never refused"
                time.sleep(0.1)
        # Refused by the draining server, or, with nothing in flight, by its closed port.
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert err.value.details() == "the server is shutting down; retry elsewhere" \
            or "Connection refused" in err.value.details()
        assert time.monotonic() - signalled > 3.5
        assert proc.wait(timeout=30) == 0
        assert "still accepting work for 4s" in proc.stderr.read()
    finally:
        proc.kill()


def test_sighup_drains_like_sigterm_and_says_so(tiny_package):
    """SIGHUP (the terminal or SSH session that started nmt-serve went away) killed it at once: exit
    -1, the call in flight UNAVAILABLE, nothing logged. It drains now, as SIGTERM does."""
    metrics_port = free_port()
    proc, port = start(tiny_package, "--grace-seconds", "20", "--metrics-port", str(metrics_port))
    try:
        wait_serving(port, proc)
        stub = pb_grpc.TranslatorStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        in_flight = [stub.Translate.future(request(*["He said,", LONG] * 16, beam_size=8, max_output_tokens=200,
                                                   no_sentence_split=True)) for _ in range(4)]
        end = time.monotonic() + 30
        while _metric(metrics_port, "nmt_texts_total{") < 4 * 32:  # every request accepted
            assert time.monotonic() < end, "the work never arrived"
            time.sleep(0.01)
        proc.send_signal(signal.SIGHUP)
        for call in in_flight:  # in-flight work finishes
            assert [len(t.hypotheses) for t in call.result(timeout=60).translations] == [1] * 32
        assert proc.wait(timeout=30) == 0
        lines = _log_lines(proc.stderr.read())
        assert lines[-2:] == ["INFO nmt.server: SIGHUP received: draining (grace 20s)", "INFO nmt.server: stopped"]
    finally:
        proc.kill()


def _threads(pid: int) -> int:
    return int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("Threads:")))


def test_idle_metrics_connections_cost_no_thread_and_metrics_still_answer(tiny_package):
    """prometheus_client's exporter held a thread per open connection, with no cap and no timeout:
    1,000 idle sockets left nmt-serve with 1,016 threads. Served from the event loop, 200 idle
    sockets add none, and a scrape still gets through (beyond the cap the oldest silent one goes)."""
    metrics_port = free_port()
    proc, port = start(tiny_package, "--metrics-port", str(metrics_port))
    idle = []
    try:
        wait_serving(port, proc)
        assert _metric(metrics_port, "nmt_model_device{") == 1
        before = _threads(proc.pid)
        idle = [socket.create_connection(("127.0.0.1", metrics_port), timeout=10) for _ in range(200)]
        time.sleep(1.0)  # time to accept them all (the old exporter started a thread for each)
        assert _threads(proc.pid) <= before + 2  # was before + 200
        assert _metric(metrics_port, "nmt_model_device{") == 1
        assert _threads(proc.pid) <= before + 2
    finally:
        for sock in idle:
            sock.close()
        proc.kill()


def test_metrics_close_silent_connections_and_make_room_for_a_scrape():
    """A connection that sends no request within the time is closed; beyond the cap the oldest silent
    one is closed to let the new one in; a request gets the exposition, other methods 405."""
    async def scenario() -> None:
        exporter = MetricsServer(Metrics().registry, max_connections=3, request_seconds=0.5)
        port = await exporter.start("127.0.0.1", 0)
        try:
            silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
            await asyncio.sleep(0.1)
            assert exporter.connections == 3
            reader, writer = await asyncio.open_connection("127.0.0.1", port)  # the fourth: the first goes
            assert await asyncio.wait_for(silent[0][0].read(), 5) == b""
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4")
            assert b"\r\nConnection: close\r\n" in answer and b"# TYPE nmt_requests_total counter" in answer
            started = time.monotonic()
            for r, _ in silent[1:]:  # sent nothing: closed after request_seconds
                assert await asyncio.wait_for(r.read(), 5) == b""
            assert 0.3 < time.monotonic() - started < 3
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /metrics HTTP/1.1\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 405 Method Not Allowed\r\n")
            await asyncio.sleep(0.1)
            assert exporter.connections == 0
        finally:
            await exporter.close()

    asyncio.run(scenario())


def test_a_second_server_on_the_default_metrics_port_starts_without_metrics_and_says_so(tiny_package):
    """The default metrics port taken (a second nmt-serve on one machine) stops nobody: the server
    serves, without metrics, after one warning naming the port and the flag to pass."""
    with socket.socket() as taken:
        with contextlib.suppress(OSError):  # already taken by something else: as good
            taken.bind(("127.0.0.1", METRICS_PORT))
            taken.listen()
        port = free_port()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        env.pop("NMT_METRICS_PORT", None)
        proc = subprocess.Popen([sys.executable, "-m", "server.main", "--model", f"tiny={tiny_package}", "--port",
                                 str(port), "--threads", "1"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        try:
            wait_serving(port, proc)
            assert pb_grpc.TranslatorStub(grpc.insecure_channel(f"127.0.0.1:{port}")).Translate(
                request("Jesus wept."), timeout=30).translations
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    lines = _log_lines(proc.stderr.read())
    assert f"WARNING nmt.server: no metrics: the default metrics port 127.0.0.1:{METRICS_PORT} is already in use " \
           "(another nmt-serve?); pass --metrics-port PORT to export them there (0 picks a free port), or " \
           "--metrics-port -1 to go without them and without this warning" in lines
    assert any(line.startswith(f"INFO nmt.server: serving tiny on 127.0.0.1:{port} (gRPC; metrics off)")
               for line in lines)


def _metric(metrics_port: int, prefix: str) -> float:
    import urllib.request

    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in body.splitlines() if line.startswith(prefix))


def test_work_unfinished_when_the_grace_runs_out_ends_unavailable_not_cancelled(tiny_package):
    """A drain whose grace is used up ends the calls still running with UNAVAILABLE, which
    clients retry elsewhere (grpc's own stop would answer CANCELLED, which they must not)."""
    server = ServerThread(tiny_package)
    stub = server.stub()
    work = request(*["He said,", LONG] * 32, beam_size=8, max_output_tokens=200, no_sentence_split=True)
    unary = [stub.Translate.future(work, timeout=60) for _ in range(4)]
    # The stream's client keeps it open after its one request, so it is still running when the
    # drain ends it even where a fast CPU has answered that request already (a stream that had
    # ended by itself raced the drain and came back OK).
    release = threading.Event()

    def requests():
        yield work
        release.wait(60)

    stream = stub.TranslateStream(requests(), timeout=60)
    try:
        wait_until(lambda: server.running.service.active == 5)
        server.call(server.running.drain(0.0))
        for call in unary:
            assert (call.exception(timeout=30).code(), call.exception().details()) == (grpc.StatusCode.UNAVAILABLE,
                                                                                       STOPPED)
        assert code_and_details(lambda: list(stream)) == (grpc.StatusCode.UNAVAILABLE, STOPPED)
    finally:
        release.set()
    server.loop.call_soon_threadsafe(server.loop.stop)


def test_bad_model_package_is_a_clear_start_up_error(tiny_package, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_package, bad)
    (bad / "tokenizer.model").write_bytes(b"garbage")
    proc, _ = start(bad)
    assert proc.wait(timeout=60) == 2
    err = proc.stderr.read()
    assert f"model package {bad} is not valid" in err
    assert "tokenizer.model does not match its sha256 in model.json (corrupt or replaced)" in err
    proc, _ = start(tmp_path / "nowhere")
    assert proc.wait(timeout=60) == 2 and "the directory does not exist" in proc.stderr.read()


def _log_lines(stderr: str) -> list[str]:
    """stderr's log lines without their time stamps: "INFO nmt.server: ..."."""
    return [line.split(" ", 2)[2] for line in stderr.splitlines() if re.match(r"\d{4}-\d\d-\d\d ", line)]


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime has CUDA")
def test_device_auto_on_a_cpu_build_serves_on_cpu_saying_why_at_debug(tiny_package):
    """The plain onnxruntime package on a machine without a GPU is the expected CPU install: at INFO
    the start-up says the CPU and nothing of CUDA (it said "CUDA not used ... install
    onnxruntime-gpu" to everyone); at DEBUG the reason is there."""
    for level in ("INFO", "DEBUG"):
        proc, port = start(tiny_package, "--device", "auto", "--log-level", level)
        try:
            wait_serving(port, proc)
            [m] = pb_grpc.TranslatorStub(grpc.insecure_channel(f"127.0.0.1:{port}")).ListModels(
                pb.ListModelsRequest()).models
            assert (m.device, m.device_resident) == ("cpu", False)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        lines = _log_lines(proc.stderr.read())
        assert not [line for line in lines if line.startswith("WARNING ")]
        why = (f"this onnxruntime build has no CUDA provider (it has {', '.join(ort.get_available_providers())}; "
               "install onnxruntime-gpu instead of onnxruntime)")
        said = [line for line in lines if "CUDA not used" in line]
        if level == "INFO":
            assert said == []
        else:
            assert f"INFO nmt.engine: CUDA not used, serving on the CPU: {why}" in said
            assert any(line.startswith("DEBUG nmt.server: model tiny: providers CPUExecutionProvider") and
                       line.endswith(f"; CUDA not used: {why}") for line in said)


def test_start_up_says_what_is_served_where_and_how_in_plain_lines(tiny_package):
    """At INFO: one line per model (its package, pairs, variant and device) and one saying where it
    listens; no JSON dump of the configuration (that is at DEBUG). The variant is the default one,
    int8 on the CPU: README's nmt-serve command, scripts/run.sh and compose serve the same graphs."""
    proc, port = start(tiny_package, "--device", "auto")
    try:
        wait_serving(port, proc)
        [m] = pb_grpc.TranslatorStub(grpc.insecure_channel(f"127.0.0.1:{port}")).ListModels(
            pb.ListModelsRequest()).models
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    variant = int8_variant(ModelPackage.load(tiny_package).variants)
    assert variant in ("int8", "int8w8") and (m.device, m.variant) == ("cpu", variant)
    lines = _log_lines(proc.stderr.read())
    assert lines[0] == (f"INFO nmt.server: model tiny: {tiny_package} (en-de, de-en), {variant} graphs on the CPU "
                        "(1 thread)")
    assert re.fullmatch(rf"INFO nmt.server: serving tiny on 127\.0\.0\.1:{port} \(gRPC; metrics off\), ready in "
                        r"\d+\.\ds", lines[1]), lines[1]
    assert lines[2:] == ["INFO nmt.server: SIGTERM received: draining (grace 10s)", "INFO nmt.server: stopped"]
    # --no-int8 serves the fp32 graphs, and says so
    proc, port = start(tiny_package, "--no-int8")
    try:
        wait_serving(port, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert _log_lines(proc.stderr.read())[0].endswith("(en-de, de-en), fp32 graphs on the CPU (1 thread)")


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime has CUDA")
def test_device_cuda_without_a_gpu_refuses_to_start(tiny_package):
    """The user asked for the GPU: serving on the CPU instead would be a silent 20x slowdown."""
    line = _start_up_error("--model", str(tiny_package), "--port", "0", "--metrics-port", "-1", "--device", "cuda")
    assert line == (f"cannot start: model tiny ({tiny_package}) does not load: --device cuda: this onnxruntime "
                    f"build has no CUDA provider (it has {', '.join(ort.get_available_providers())}; install "
                    "onnxruntime-gpu instead of onnxruntime)")


def test_configuration_from_environment_variables(tiny_package):
    from server.config import parse_args

    cfg = parse_args([], {"NMT_MODEL": f"a={tiny_package},b={tiny_package}", "NMT_MAX_TEXTS": "7", "NMT_INT8": "true"})
    assert cfg.model == (f"a={tiny_package}", f"b={tiny_package}") and cfg.max_texts == 7 and cfg.int8
    assert parse_args(["--max-texts", "9", "--model", "x"], {"NMT_MAX_TEXTS": "7"}).max_texts == 9  # flags win
    with pytest.raises(SystemExit):
        parse_args([], {"NMT_MAX_TEXTS": "many", "NMT_MODEL": "x"})


def test_full_queue_rejects_fast_with_resource_exhausted(tiny_package):
    s = ServerThread(tiny_package, max_queue=1, max_batch_rows=1, max_texts=1, max_beam=1)
    try:
        stub = s.stub()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            # LONG as one sentence: one text is one job, and a queue of one holds it.
            futures = [pool.submit(stub.Translate, request(LONG, max_output_tokens=100, no_sentence_split=True))
                       for _ in range(16)]
            outcomes = []
            for f in futures:
                try:
                    f.result()
                    outcomes.append("ok")
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    assert e.details() == "server busy: the queue of model tiny is full (1 texts waiting); retry " \
                                          "with backoff"
                    outcomes.append("busy")
        assert "ok" in outcomes and "busy" in outcomes
    finally:
        s.stop()


def test_a_failing_item_fails_alone(tiny_package):
    """The encoder fails on one source and the decoder on another; everyone else is served."""
    s = ServerThread(tiny_package)
    try:
        rt = s.scheduler.rt
        sp = s.running.models["tiny"].tokenizer
        texts = ["Jesus wept.", "The Pharisees", "He said,", "Lazarus Lazarus Lazarus Lazarus Lazarus", "Peace."]
        lengths = [len(sp.encode(t)) + 2 for t in texts]  # tag + pieces + eos
        enc_bad, dec_bad = lengths[1], lengths[3]
        assert lengths.count(enc_bad) == 1 and lengths.count(dec_bad) == 1
        real_encode, real_step = rt.encode, rt.step

        def encode(src_ids):
            if ((src_ids != 0).sum(axis=1) == enc_bad).any():
                raise RuntimeError("injected encoder fault")
            return real_encode(src_ids)

        def step(input_ids, positions, past_mask, src_mask, *rest):
            if (src_mask.sum(axis=1) == dec_bad).any():
                raise RuntimeError("injected decoder fault")
            return real_step(input_ids, positions, past_mask, src_mask, *rest)

        rt.encode, rt.step = encode, step
        stub = s.stub()
        with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
            futures = {t: pool.submit(stub.Translate, request(t)) for t in texts}
        for t, f in futures.items():
            if t in ("The Pharisees", "Lazarus Lazarus Lazarus Lazarus Lazarus"):
                with pytest.raises(grpc.RpcError) as err:
                    f.result()
                assert err.value.code() == grpc.StatusCode.INTERNAL
                assert "Traceback" not in err.value.details() and "injected" not in err.value.details()
            else:
                assert len(f.result().translations[0].hypotheses) == 1
        rt.encode, rt.step = real_encode, real_step
        assert len(stub.Translate(request("The Pharisees")).translations) == 1
    finally:
        s.stop()


# ---------------------------------------------------------------- TLS and tokens
def _certificates(tmp: Path) -> dict[str, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("test ca")).issuer_name(name("test ca"))
          .public_key(ca_key.public_key()).serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    out = {"ca": tmp / "ca.pem"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for who, san in (("server", "localhost"), ("client", "client")):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(san)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(2 if who == "server" else 3)
                .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        out[f"{who}_cert"] = tmp / f"{who}.pem"
        out[f"{who}_key"] = tmp / f"{who}.key"
        out[f"{who}_cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        out[f"{who}_key"].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                        serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
    return out


def test_mutual_tls_and_bearer_token(tiny_package, tmp_path):
    c = _certificates(tmp_path)
    s = ServerThread(tiny_package, tls_cert=str(c["server_cert"]), tls_key=str(c["server_key"]),
                     tls_client_ca=str(c["ca"]), auth_token="s3cret")
    try:
        options = (("grpc.ssl_target_name_override", "localhost"),)
        target = f"localhost:{s.port}"
        good = grpc.ssl_channel_credentials(c["ca"].read_bytes(), c["client_key"].read_bytes(),
                                            c["client_cert"].read_bytes())
        stub = pb_grpc.TranslatorStub(grpc.secure_channel(target, good, options))
        token = (("authorization", "Bearer s3cret"),)
        assert len(stub.Translate(request("Jesus wept."), metadata=token).translations) == 1
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(request("Jesus wept."))
        assert (err.value.code(), err.value.details()) == (grpc.StatusCode.UNAUTHENTICATED,
                                                           "missing or wrong bearer token")
        with pytest.raises(grpc.RpcError) as err:
            list(stub.TranslateStream(iter([request("Jesus wept.")]), metadata=(("authorization", "Bearer no"),)))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(grpc.secure_channel(target, good, options))
        assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
        no_client_cert = grpc.ssl_channel_credentials(c["ca"].read_bytes())
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.TranslatorStub(grpc.secure_channel(target, no_client_cert, options)).Translate(
                request("Jesus wept."), metadata=token, timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError):
            pb_grpc.TranslatorStub(grpc.insecure_channel(target)).Translate(request("x"), metadata=token, timeout=5)
    finally:
        s.stop()


def test_server_imports_neither_torch_nor_onnx(tiny_package):
    code = ("import sys, asyncio, dataclasses; from server.main import build_server; "
            "from server.config import ServerConfig; "
            f"cfg = ServerConfig(model=({str(tiny_package)!r},), host='127.0.0.1', port=0, metrics_port=-1); "
            "running = asyncio.run(build_server(cfg)); "
            "bad = [m for m in ('torch', 'onnx', 'training') if m in sys.modules]; "
            "assert not bad, bad; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def _broken_copy(package: Path, tmp_path: Path, name: str, change) -> Path:
    """A copy of the package with model.json (and maybe a file) changed; the sha256 of a
    changed file and model.json's own checksum are updated, as a deliberate edit would, so
    that the fault meets the checks past them (the graphs, the warm-up)."""
    import hashlib
    import json

    from engine.package import manifest_checksum

    out = tmp_path / name
    shutil.copytree(package, out)
    manifest = json.loads((out / "model.json").read_text())
    change(out, manifest)
    for f in manifest["files"]:
        manifest["files"][f] = hashlib.sha256((out / f).read_bytes()).hexdigest()
    manifest["checksum"] = manifest_checksum(manifest)
    (out / "model.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize("name, change, expected", [
    ("eos", lambda d, m: m["special_ids"].update(eos=99999),
     "special_ids.eos is 99999, not an id of the 400-piece vocabulary"),
    ("tag", lambda d, m: m["language_tags"].update(en=400),
     "language_tags.en is 400, not an id of the 400-piece vocabulary"),
    ("graph", lambda d, m: [f.write_bytes(b"\x08\x07garbage") for f in d.glob("decoder*.onnx")],  # every variant
     "model tiny ("),
    ("heads", lambda d, m: m["model"].update(n_heads=2, d_head=32),
     "model tiny ("),
])
def test_start_up_faults_are_one_line_and_exit_2(tiny_package, tmp_path, name, change, expected):
    proc, _ = start(_broken_copy(tiny_package, tmp_path, name, change))
    assert proc.wait(timeout=60) == 2  # was: a traceback and exit 1 (or SERVING, failing one pair's requests)
    err = proc.stderr.read()
    assert "Traceback" not in err
    [line] = [x for x in err.splitlines() if "cannot start" in x]
    assert expected in line or expected in err


def test_the_token_is_checked_before_the_body_is_parsed(tiny_package, tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    s = ServerThread(tiny_package, auth_token_file=str(tmp_path / "token"))
    try:
        garbage = grpc.insecure_channel(s.address).unary_unary("/nmt.v1.Translator/Translate")
        with pytest.raises(grpc.RpcError) as err:
            garbage(b"\xff\xff\xff", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as err:
            garbage(b"\xff\xff\xff", timeout=10, metadata=(("authorization", "Bearer s3cret"),))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        token = (("authorization", "Bearer s3cret"),)  # the file's token, without its newline
        assert s.stub().Translate(request("Jesus wept."), metadata=token).translations
        for scheme in ("bearer", "BEARER"):  # the scheme is case-insensitive (RFC 9110)
            assert s.stub().Translate(request("Jesus wept."), metadata=(("authorization", f"{scheme} s3cret"),))
        assert code_and_details(lambda: s.stub().Translate(request("Jesus wept."), metadata=(
            ("authorization", "Basic s3cret"),)))[0] == grpc.StatusCode.UNAUTHENTICATED
    finally:
        s.stop()


def test_calls_beyond_the_concurrency_cap_get_resource_exhausted_at_once(tiny_package):
    s = ServerThread(tiny_package, max_concurrent_rpcs=2)
    try:
        stub = s.stub()
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            calls = [pool.submit(stub.Translate, request(LONG, beam_size=8, max_output_tokens=200), timeout=60)
                     for _ in range(12)]
            codes = []
            for c in calls:
                try:
                    c.result()
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    codes.append(e.code())
        assert grpc.StatusCode.OK in codes and grpc.StatusCode.RESOURCE_EXHAUSTED in codes
        assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
    finally:
        s.stop()


# ---------------------------------------------------------------- user mistakes: one line, exit 2
def _start_up_error(*args: str) -> str:
    """Run nmt-serve as users do, expect exit 2, return its last stderr line without the log prefix."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "server.main", "--threads", "1", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    return r.stderr.splitlines()[-1].split(" ERROR nmt.server: ", 1)[1]


def test_a_taken_port_names_the_port_and_what_to_do(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Binding comes before the models are read: no package is needed to meet it.
        assert _start_up_error("--model", str(tmp_path), "--port", str(port), "--metrics-port", "-1") == (
            f"cannot start: cannot listen for gRPC on 127.0.0.1:{port}: the port is already in use (another "
            f"nmt-serve?); stop that process or pass another --port (0 picks a free port)")
        assert _start_up_error("--model", str(tmp_path), "--port", str(free_port()), "--metrics-port", str(port)) \
            == (f"cannot start: cannot listen for metrics on 127.0.0.1:{port}: the port is already in use (another "
                f"nmt-serve?); stop that process or pass another --metrics-port (0 picks a free port or -1 to turn "
                f"metrics off)")
    port = free_port()
    assert _start_up_error("--model", str(tmp_path), "--host", "192.0.2.1", "--port", str(port)) == (
        f"cannot start: cannot listen for gRPC on 192.0.2.1:{port}: 192.0.2.1 is not an address of this machine; "
        f"pass --host 127.0.0.1 (this machine only) or --host 0.0.0.0 (every interface)")


def test_a_checkpoint_given_as_a_package_says_to_export_it(tmp_path):
    shipped = tmp_path / "default"  # as models/default: a shipped checkpoint, not a package
    shipped.mkdir()
    (shipped / "model.pt").write_bytes(b"weights")
    port = str(free_port())
    assert _start_up_error("--model", str(shipped), "--port", port, "--metrics-port", "-1") == (
        f"cannot start: model package {shipped} is not valid: this is a checkpoint, not a model package: export it "
        f"with nmt-export {shipped} OUT, then pass OUT")
    assert _start_up_error("--model", str(shipped / "model.pt"), "--port", port, "--metrics-port", "-1") == (
        f"cannot start: model package {shipped / 'model.pt'} is not valid: this is a checkpoint, not a model "
        f"package: export it with nmt-export {shipped / 'model.pt'} OUT, then pass OUT")
    assert _start_up_error("--model", str(tmp_path / "nowhere"), "--port", port, "--metrics-port", "-1") == (
        f"cannot start: model package {tmp_path / 'nowhere'} is not valid: the directory does not exist (give the "
        f"directory nmt-export wrote)")
    assert _start_up_error("--model", str(tmp_path), "--port", port, "--metrics-port", "-1", "--tls-cert",
                           str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k.pem")) == (
        f"cannot start: --tls-key {tmp_path / 'k.pem'}: cannot read it: No such file or directory")


def test_language_codes_are_case_insensitive(tiny_package):
    s = ServerThread(tiny_package)
    try:
        stub = s.stub()
        lower = stub.Translate(request("Jesus wept.", src="en", tgt="de"))
        upper = stub.Translate(request("Jesus wept.", src="EN", tgt=" De "))
        assert [t.hypotheses[0].text for t in upper.translations] == [t.hypotheses[0].text
                                                                      for t in lower.translations]
        with pytest.raises(grpc.RpcError) as err:
            stub.Translate(request("Jesus wept.", src="EN", tgt="FR"))
        assert err.value.details() == "language pair 'en-fr' is not supported by model 'tiny'; supported: en-de, de-en"
    finally:
        s.stop()


def _idle_stream(stub, hold: threading.Event):
    """A TranslateStream that sends nothing until ``hold`` is set; returns its answer iterator."""
    def nothing():
        hold.wait()
        return
        yield  # pragma: no cover
    return stub.TranslateStream(nothing(), timeout=60)


def test_idle_streams_cannot_take_health_or_every_call(tiny_package):
    s = ServerThread(tiny_package, max_concurrent_rpcs=3, max_streams=8, stream_idle_seconds=30.0)
    hold = threading.Event()
    try:
        stub = s.stub()
        streams = [_idle_stream(stub, hold) for _ in range(3)]
        wait_until(lambda: s.running.service.active == 3)
        assert code_and_details(lambda: stub.Translate(request("Jesus wept."), timeout=10)) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "3 calls are in progress; the limit is 3 (--max-concurrent-rpcs): try again later")
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(s.address))
        for _ in range(20):  # health has room of its own, however many calls are held open
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
                health_pb2.HealthCheckResponse.SERVING
        hold.set()  # the clients close their side: the streams end normally
        assert [list(x) for x in streams] == [[], [], []]
        assert stub.Translate(request("Jesus wept."), timeout=30).translations
    finally:
        hold.set()
        s.stop()


def test_streams_beyond_the_cap_are_refused_and_idle_ones_closed(tiny_package):
    s = ServerThread(tiny_package, max_streams=2, stream_idle_seconds=1.0)
    hold = threading.Event()
    try:
        stub = s.stub()
        streams = [_idle_stream(stub, hold) for _ in range(2)]
        wait_until(lambda: s.running.service.streams == 2)
        third = _idle_stream(stub, hold)
        assert code_and_details(lambda: list(third)) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "2 streams are open; the limit is 2 (--max-streams): try again later or send Translate calls")
        for x in streams:  # nothing in flight and nothing sent for 1 s: closed by the server
            assert code_and_details(lambda x=x: list(x)) == (
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "the stream was idle for 1 s: no request and none in flight (--stream-idle-seconds); "
                "open a new stream to go on")
        wait_until(lambda: s.running.service.streams == 0)
        assert stub.Translate(request("Jesus wept."), timeout=30).translations
    finally:
        hold.set()
        s.stop()


def test_idle_tcp_connections_are_capped_and_closed(tiny_package):
    s = ServerThread(tiny_package, max_connections=4, handshake_seconds=1.0)
    idle = []
    try:
        for _ in range(12):
            with contextlib.suppress(OSError):  # refused: as good as closed
                idle.append(socket.create_connection(("127.0.0.1", s.port), timeout=10))
        started = time.monotonic()
        for sock in idle:  # each sent nothing: closed after the handshake time, or at once beyond the cap
            with contextlib.suppress(ConnectionResetError):
                while sock.recv(4096):  # the server's HTTP/2 settings (and goaway), then the end
                    pass
        assert time.monotonic() - started < 10
        assert s.stub().Translate(request("Jesus wept."), timeout=30, wait_for_ready=True).translations
    finally:
        for sock in idle:
            sock.close()
        s.stop()


def test_warm_up_warns_of_a_model_that_never_ends_and_serves_it(tiny_package, caplog):
    """An undertrained model (40 steps of training) or an eos id the model was not trained with
    (the tokenizer cannot tell: here the package's eos is changed in memory, past the load checks)
    makes every answer run to its limit. That is a bad model, not a broken package: warm-up (which
    refused it, so that nothing served) warns with the likely causes, and the server serves it."""
    good = ModelPackage.load(tiny_package)
    tokenizer = spm.SentencePieceProcessor(model_file=str(good.tokenizer_path))
    runtime = Runtime(good, RuntimeOptions(device="cpu", threads=1))

    def model(package: ModelPackage) -> LoadedModel:
        return LoadedModel("tiny", package, tokenizer, Scheduler(runtime, SchedulerLimits()),
                           RequestLimits.of(ServerConfig(), package))

    with caplog.at_level(logging.WARNING, logger="nmt.server"):
        warm_up(model(good))  # the real package: its translations end
        assert caplog.messages == []
        never = dataclasses.replace(good, special_ids={**good.special_ids, "eos": tokenizer.unk_id()},
                                    provenance={**good.provenance, "step": 40})
        warm_up(model(never))  # was: StartupError, and nmt-serve exited 2
    assert caplog.messages == [
        f"model tiny ({tiny_package}): no warm-up translation of 'Thank you.' ended: each ran to its length limit "
        f"without the end-of-sentence id (special_ids.eos {tokenizer.unk_id()}), so its translations will run on "
        f"to the output-length limit. Serving it anyway. Likely causes: the model is undertrained (trained 40 "
        f"steps): train it longer; or model.json's special ids do not match the checkpoint: export it again"]
