"""nmt-health (server/health_probe.py), the probe of the containers' health checks."""

from __future__ import annotations

import socket
import time

from server.health_probe import main as probe
from tests.server_harness import ServerThread
from tests.test_server_process import _certificates


def test_serving_server_exits_zero_and_says_so(tiny_package, capsys):
    s = ServerThread(tiny_package)
    try:
        assert probe(["--address", s.address]) == 0
        assert probe(["--address", s.address, "--service", "nmt.v1.Translator"]) == 0
        assert capsys.readouterr().out.splitlines() == [f"{s.address}: SERVING"] * 2
        assert probe(["--address", s.address, "--service", "no.such.Service"]) == 1
    finally:
        s.stop()


def test_draining_server_is_not_serving(tiny_package, capsys):
    s = ServerThread(tiny_package)
    try:
        s.call(s.running.health.enter_graceful_shutdown())
        assert probe(["--address", s.address]) == 1
        assert capsys.readouterr().out.strip() == f"{s.address}: NOT_SERVING"
    finally:
        s.stop()


def test_nothing_listening_fails_within_the_timeout(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    assert probe(["--address", f"127.0.0.1:{port}", "--timeout", "1"]) == 1
    assert time.monotonic() - start < 5
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_mutual_tls(tiny_package, tmp_path):
    c = _certificates(tmp_path)
    s = ServerThread(tiny_package, tls_cert=str(c["server_cert"]), tls_key=str(c["server_key"]),
                     tls_client_ca=str(c["ca"]), auth_token="s3cret")
    try:
        tls = ["--tls-ca", str(c["ca"]), "--tls-client-cert", str(c["client_cert"]),
               "--tls-client-key", str(c["client_key"])]
        assert probe(["--address", s.address, *tls]) == 0  # no bearer token needed for health
        assert probe(["--address", s.address, "--timeout", "2"]) == 1  # plaintext against TLS
    finally:
        s.stop()
