"""server/child.py: nmt-serve as a child process, as benchmarks and tools start it."""

from __future__ import annotations

import grpc
import pytest

from nmt.v1 import translator_pb2_grpc as pb_grpc
from server.child import NotServing, ServerProcess, process_rss_mib
from tests.server_harness import request


def test_a_child_server_serves_then_stops_cleanly(tiny_package, tmp_path):
    log = tmp_path / "server.log"
    with ServerProcess(f"tiny={tiny_package}", threads=1, log=log) as server:
        stub = pb_grpc.TranslatorStub(grpc.insecure_channel(server.address))
        [translation] = stub.Translate(request("Jesus wept."), timeout=30).translations
        assert translation.hypotheses[0].num_tokens > 0
        assert process_rss_mib(server.pid) > 0
    assert server.proc.returncode == 0  # SIGTERM: it drained and exited cleanly


def test_a_child_that_cannot_start_says_so_with_its_exit_code(tmp_path):
    with pytest.raises(RuntimeError, match=r"nmt-serve exited with code 2 before serving"), \
            ServerProcess(tmp_path / "no-such-package", threads=1, log=tmp_path / "server.log"):
        pass
    assert "no-such-package is not valid: the directory does not exist" in (tmp_path / "server.log").read_text()


def test_a_child_serves_without_the_sentence_cache_unless_told():
    """Benchmarks resend the same sentences: their server decodes them, unless ``extra`` turns the cache on."""
    assert ServerProcess("pkg", threads=1).args[-2:] == ["--cache", "off"]
    assert ServerProcess("pkg", threads=1, extra=["--cache", "auto"]).args[-2:] == ["--cache", "auto"]


def test_a_server_that_exits_before_serving_says_why(tmp_path):
    """Where the log does not travel (a GPU host gives back only results), the error carries its end."""
    log = tmp_path / "server.log"
    with pytest.raises(NotServing) as caught, ServerProcess(tmp_path / "no-package", 1, log=log, device="cpu"):
        pass
    said = str(caught.value)
    assert "exited with code 2" in said
    assert "its log ends: " in said and "no-package" in said.split("its log ends: ")[1]
