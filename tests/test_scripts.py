"""scripts/run.sh and its checks (scripts/run_checks.py, scripts/wait_serving.py): a taken port
stops it before anything is built, the server it waits for must be the one it started, and a
package is exported again only when it is stale and no running server uses it; and the e2e
scripts' engine helpers (scripts/e2e_docker.sh) retry a dockerd that failed to start."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.package import Manifest, write_manifest
from tests.server_harness import ServerThread

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def script(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=ROOT, env=env or ENV, capture_output=True, text=True, timeout=timeout)


def checks(*args: str) -> subprocess.CompletedProcess:
    return script(sys.executable, "scripts/run_checks.py", *args)


def test_run_sh_stops_at_once_when_its_port_is_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        r = script("bash", "scripts/run.sh", env={**ENV, "PORT": str(port), "PYTHON": sys.executable})
    assert r.returncode == 2
    assert r.stderr == (f"run.sh: port {port} on 127.0.0.1 is already in use by pid {os.getpid()} (Address already "
                        f"in use); a server there would answer for the one this script starts. Stop it, or pick "
                        f"another port: PORT={port + 1} bash scripts/run.sh\n")
    assert r.stdout == ""  # nothing was set up, exported or started
    assert time.monotonic() - started < 30


def test_the_server_waited_for_must_be_the_process_started(tiny_package):
    s = ServerThread(tiny_package)  # this test's process holds the port, as a server left running would
    other = subprocess.Popen(["sleep", "60"])
    try:
        r = script(sys.executable, "scripts/wait_serving.py", "--address", s.address, "--pid", str(other.pid),
                   "--timeout", "20")
        assert r.returncode == 1
        assert r.stderr == (f"run.sh: port {s.port} answers, but from pid {os.getpid()}, not from the server this "
                            f"script started (pid {other.pid}); stop that process or pick another port: "
                            f"PORT={s.port + 1} bash scripts/run.sh\n")
        r = script(sys.executable, "scripts/wait_serving.py", "--address", s.address, "--pid", str(os.getpid()))
        assert (r.returncode, r.stderr) == (0, "")
    finally:
        other.kill()
        other.wait()
        s.stop()
    gone = subprocess.Popen(["true"])
    gone.wait()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    r = script(sys.executable, "scripts/wait_serving.py", "--address", f"127.0.0.1:{port}", "--pid", str(gone.pid))
    assert (r.returncode, r.stderr) == (1, f"the server (pid {gone.pid}) exited before it was SERVING: see its "
                                           "message above\n")


def test_a_package_is_current_only_if_exported_from_this_checkpoint(tiny_package, tiny_checkpoint, tmp_path):
    assert (checks("package-current", str(tiny_package), str(tiny_checkpoint)).returncode) == 0
    old = tmp_path / "old"
    shutil.copytree(tiny_package, old)
    manifest = json.loads((old / "model.json").read_text())
    del manifest["provenance"]["checkpoint_sha256"]
    write_manifest(old, Manifest.from_json(manifest))
    r = checks("package-current", str(old), str(tiny_checkpoint))
    assert (r.returncode, r.stderr) == (1, f"run.sh: exporting {old}: its model.json does not record the "
                                           "checkpoint's sha256 (an older export)\n")
    other = tmp_path / "other.pt"
    other.write_bytes(tiny_checkpoint.read_bytes() + b"\0")
    r = checks("package-current", str(tiny_package), str(other))
    assert (r.returncode, r.stderr) == (1, f"run.sh: exporting {tiny_package}: it was exported from another "
                                           f"checkpoint than {other}\n")
    r = checks("package-current", str(tmp_path / "none"), str(tiny_checkpoint))
    assert (r.returncode, r.stderr) == (1, f"run.sh: exporting {tmp_path / 'none'}: it does not exist yet\n")


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads running servers from /proc")
def test_a_package_served_by_a_running_server_is_not_exported_again(tiny_package, tmp_path):
    package = tmp_path / "served"
    shutil.copytree(tiny_package, package)
    assert checks("package-unused", str(package)).returncode == 0
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "server.main", "--model", f"tiny={package}", "--port", str(port),
                               "--metrics-port", "-1", "--threads", "1"], cwd=ROOT, env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = checks("package-unused", str(package))
        assert r.returncode == 2
        assert r.stderr == (f"run.sh: {package} must be exported again, but nmt-serve (pid {server.pid}) serves it; "
                            "stop that server first, or export elsewhere: PACKAGE=packages/new bash scripts/run.sh\n")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def test_train_default_refuses_a_ship_value_it_does_not_know():
    r = script("bash", "scripts/train_default.sh", env={**ENV, "SHIP": "yes", "PYTHON": sys.executable})
    assert (r.returncode, r.stderr, r.stdout) == (2, "SHIP must be 0 or 1, got 'yes'\n", "")


def test_steady_load_counts_every_request_and_fails_on_a_refusal(tiny_package, tmp_path):
    """scripts/steady_load.py (the load of scripts/swarm_e2e.sh's rolling update): exit 0 with only
    successes; a request refused while the server drains is a failure, with its status and reason."""
    s = ServerThread(tiny_package)
    try:
        def run(refuse_after: float | None) -> tuple[int, dict]:
            stop = tmp_path / f"stop-{refuse_after}"
            load = subprocess.Popen([sys.executable, "scripts/steady_load.py", "--address", s.address, "--workers",
                                     "2", "--stop-file", str(stop), "--max-seconds", "60"], cwd=ROOT, env=ENV,
                                    stdout=subprocess.PIPE, text=True)
            time.sleep(3)
            if refuse_after is not None:
                s.running.service.draining = True  # what SIGTERM does after the lame-duck period
                time.sleep(refuse_after)
                s.running.service.draining = False
            stop.touch()
            out, _ = load.communicate(timeout=60)
            return load.returncode, json.loads(out)

        rc, summary = run(None)
        assert rc == 0 and summary["failed"] == 0 and summary["first_errors"] == []
        assert list(summary["requests"]) == ["grpc"] and list(summary["requests"]["grpc"]) == ["OK"]
        assert summary["requests"]["grpc"]["OK"] > 0
        rc, summary = run(0.5)
        assert rc == 1
        assert summary["requests"]["grpc"]["OK"] > 0
        assert summary["failed"] == summary["requests"]["grpc"]["UNAVAILABLE"] > 0
        assert summary["first_errors"][0].endswith(" grpc: UNAVAILABLE: the server is shutting down; retry elsewhere")
    finally:
        s.stop()


def test_e2e_scripts_never_wait_for_every_child():
    """start_engine runs dockerd in the background of the e2e scripts' shell, so a bare `wait`
    there waits for dockerd: a failed swarm run hung in its cleanup until it was killed."""
    import re

    scripts = [p for p in (ROOT / "scripts").glob("*.sh") if "e2e_docker.sh" in p.read_text()]
    assert {p.name for p in scripts} >= {"compose_e2e.sh", "swarm_e2e.sh"}
    for p in scripts:
        bare = [line for line in p.read_text().splitlines() if re.fullmatch(r"\s*wait(\s+2>/dev/null)?\s*", line)]
        assert not bare, f"{p.name}: {bare}"


def e2e_shell(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Runs `body` in bash under the e2e scripts' `set -euo pipefail`, with scripts/e2e_docker.sh
    sourced and its callers' log, fail, WORK and PY defined."""
    prelude = (
        "set -euo pipefail\n"
        'log() { echo "[test] $*"; }\n'
        'fail() { echo "FAILED: $*" >&2; exit 1; }\n'
        f"WORK={tmp_path}\nPY={sys.executable}\n"
        "source scripts/e2e_docker.sh\n"
    )
    return script("bash", "-c", prelude + body)


def test_stopping_an_engine_that_already_exited_lets_the_next_attempt_run(tmp_path):
    """A dockerd that panicked at start has exited before stop_engine runs: the kill of a gone
    process must not end the script under `set -e`, or start_engine never reaches attempt 2."""
    done = e2e_shell('sleep 0 & DOCKERD_PID=$!; sleep 0.5\nstop_engine\necho "after: [$DOCKERD_PID]"\n', tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "after: []"


PANIC = """panic: runtime error: index out of range [0] with length 0

goroutine 1 [running]:
github.com/docker/libnetwork.(*controller).reservePools(0x557e133c3e70?)
\t/build/src/github.com/docker/libnetwork/controller.go:956 +0xb65
"""


def test_only_the_reserve_pools_panic_moves_the_network_store_aside(tmp_path):
    root = tmp_path / "docker"
    store = root / "network" / "files" / "local-kv.db"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"bolt")
    config = tmp_path / "daemon.json"
    config.write_text(json.dumps({"data-root": str(root)}))
    body = f"export DOCKERD_CONFIG={config}\nset_aside_broken_network_store\n"

    (tmp_path / "dockerd.log").write_text('level=error msg="failed to start daemon: pid file found"\n')
    other = e2e_shell(body, tmp_path)
    assert other.returncode == 0, other.stderr
    assert other.stdout == "" and store.read_bytes() == b"bolt"

    (tmp_path / "dockerd.log").write_text(PANIC)
    moved = e2e_shell(body, tmp_path)
    assert moved.returncode == 0, moved.stderr
    aside = list(store.parent.glob("local-kv.db.broken-*"))
    assert not store.exists() and [p.read_bytes() for p in aside] == [b"bolt"]
    said = "[test] dockerd panicked on a network whose removal was cut short: its network store moves aside to"
    assert moved.stdout == f"{said} {aside[0]}\n"
