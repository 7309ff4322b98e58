"""nmt-bulk on a real local Ray: the same bytes as nmt-translate through a real server, JSONL and
Parquet inputs, a killed driver resumed, and clear refusals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from bulk.main import main as bulk_main  # noqa: E402
from clients.translate_file import main as translate_main  # noqa: E402
from tests.server_harness import ServerThread  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LONG = "x" * 4001  # one character over the server's default --max-chars: this row fails alone


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module's in-process runs (each start costs seconds): nmt-bulk uses
    a Ray its program already runs."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def rows(tiny_package) -> list[str]:
    from tests.conftest import bible_sentences

    verses = [v for v in bible_sentences("4", 200) if len(v) < 120]
    out = []
    for i, v in enumerate(verses[:90]):
        out.append(v)
        if i % 17 == 3:
            out.append("")  # blank rows stay blank
        if i == 40:
            out.append(LONG)
    return out


@pytest.fixture(scope="module")
def reference(tiny_package, rows, tmp_path_factory) -> tuple[bytes, bytes]:
    """What nmt-translate writes for the rows through a real server: output and errors file."""
    d = tmp_path_factory.mktemp("reference")
    (d / "in.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    server = ServerThread(tiny_package, model=(f"default={tiny_package}",), int8=True)  # the served default
    try:
        rc = translate_main(["-s", "en", "-t", "de", "-i", str(d / "in.txt"), "-o", str(d / "out.txt"), "--beam",
                             "1", "--address", server.address, "-q"])
    finally:
        server.stop()
    assert rc == 3  # the long row failed, and was left empty
    return (d / "out.txt").read_bytes(), (d / "out.txt.errors.tsv").read_bytes()


def bulk(*args: str) -> int:
    return bulk_main([*args, "-s", "en", "-t", "de", "--beam", "1", "-q"])


def test_text_file_gives_nmt_translates_bytes_with_two_actors(local_ray, tiny_package, rows, reference, tmp_path,
                                                              capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    rc = bulk(str(src), "-o", str(out), "--package", str(tiny_package), "--actors", "2", "--block-lines", "16")
    assert rc == 3
    assert out.read_bytes() == reference[0]
    assert (tmp_path / "out.txt.errors.tsv").read_bytes() == reference[1]
    assert reference[1].decode().startswith(f"{rows.index(LONG) + 1}\tINVALID_ARGUMENT\t4001 characters")
    assert not (tmp_path / "out.txt.partial").exists() and not (tmp_path / "out.txt.partial.blocks").exists()
    err = capsys.readouterr().err
    assert "1 line(s) could not be translated and were left empty" in err


def test_jsonl_and_parquet_columns_in_row_order(local_ray, tiny_package, rows, reference, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cells: list[str | None] = [r if r else None for r in rows]  # a missing cell is an empty row
    half = len(cells) // 2
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    for name, part in (("a.jsonl", cells[:half]), ("b.jsonl", cells[half:])):  # a directory: files in name order
        (jsonl / name).write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(part)),
                                  encoding="utf-8")
    assert bulk(str(jsonl), "-o", str(tmp_path / "j.txt"), "--package", str(tiny_package), "--block-lines", "32") == 3
    assert (tmp_path / "j.txt").read_bytes() == reference[0]

    pq.write_table(pa.table({"body": cells}), tmp_path / "rows.parquet", row_group_size=20)
    assert bulk(str(tmp_path / "rows.parquet"), "-o", str(tmp_path / "p.txt"), "--column", "body",
                "--package", str(tiny_package)) == 3
    assert (tmp_path / "p.txt").read_bytes() == reference[0]


def test_a_killed_driver_resumes_without_redoing_saved_blocks(tiny_package, rows, reference, tmp_path):
    """The driver is a process of its own that starts its own local Ray, killed with SIGKILL."""
    copies = 10  # long enough to be killed midway (a copy takes about a second)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(rows * copies) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    partial, blocks = out.with_name("out.txt.partial"), out.with_name("out.txt.partial.blocks")
    args = [sys.executable, "-m", "bulk.main", str(src), "-o", str(out), "-s", "en", "-t", "de", "--beam", "1",
            "--package", str(tiny_package), "--block-lines", "16", "-q"]
    proc = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.exists() and partial.read_bytes().count(b"\n") >= 64:
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    done = partial.read_bytes().count(b"\n")
    assert 64 <= done < len(rows) * copies and not out.exists()
    assert all(int(p.stem) >= done // 16 for p in blocks.glob("*.json"))  # saved ahead of the written rows

    resumed = subprocess.run([*args[:-1], "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 3, resumed.stderr
    assert f"resuming: {done} of {len(rows) * copies} rows already written" in resumed.stderr
    assert out.read_bytes() == reference[0] * copies
    failed = rows.index(LONG) + 1
    row = reference[1].decode().split("\t", 1)[1]
    assert (tmp_path / "out.txt.errors.tsv").read_text() == "".join(
        f"{failed + k * len(rows)}\t{row}" for k in range(copies))


def test_refusals_are_one_line_and_exit_2(local_ray, tiny_package, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("Jesus wept.\n", encoding="utf-8")
    out = str(tmp_path / "out.txt")
    assert bulk_main([str(src), "-o", out, "-s", "en", "-t", "fr", "--package", str(tiny_package)]) == 2
    assert "language pair en-fr is not supported by" in capsys.readouterr().err
    assert bulk_main([str(tmp_path / "missing.txt"), "-o", out, "-s", "en", "-t", "de"]) == 2
    assert "missing.txt: no such file or directory" in capsys.readouterr().err
    (tmp_path / "rows.jsonl").write_text('{"body": "Jesus wept."}\n', encoding="utf-8")
    assert bulk(str(tmp_path / "rows.jsonl"), "-o", out, "--package", str(tiny_package)) == 2
    assert "the input has no column 'text'; its columns: body (pick one with --column)" in capsys.readouterr().err
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "a.txt").write_text("x\n")
    (mixed / "b.jsonl").write_text('{"text": "x"}\n')
    assert bulk(str(mixed), "-o", out, "--package", str(tiny_package)) == 2
    assert "the input mixes formats (jsonl, text)" in capsys.readouterr().err
    assert bulk_main([str(src), "-o", out, "-s", "en", "-t", "de", "--actors", "0"]) == 2
    assert "--actors must be at least 1" in capsys.readouterr().err


def test_a_driver_joins_a_running_cluster_by_address_and_leaves_it_running(tiny_package, rows, reference, tmp_path):
    """A cluster started apart (``ray start --head``, as an operator would, on a loopback port): the
    driver joins it with --ray-address, writes the same bytes, and disconnects without stopping it."""
    from cli import free_port

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # nothing but the flag says where
    ray_cli = str(Path(sys.executable).parent / "ray")
    port = free_port()
    address = f"127.0.0.1:{port}"
    # Its own temporary directory (short: Ray's socket paths must fit 107 characters), so the head
    # leaves no address file where every later ray.init on this machine would look for a cluster.
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", "--temp-dir", str(temp),
                             "--port", str(port),
                             "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--include-dashboard", "false",
                             "--disable-usage-stats"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)

    def cluster_up() -> bool:
        return subprocess.run([ray_cli, "status", "--address", address], env=env, capture_output=True,
                              timeout=60).returncode == 0

    try:
        deadline = time.monotonic() + 90
        while not cluster_up():
            assert head.poll() is None, f"ray start failed: {head.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the Ray head did not come up in 90 s"
            time.sleep(1)
        src, out = tmp_path / "in.txt", tmp_path / "out.txt"
        src.write_text("\n".join(rows) + "\n", encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "bulk.main", str(src), "-o", str(out), "-s", "en", "-t", "de",
                               "--beam", "1", "--package", str(tiny_package), "--ray-address", address, "-q"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 3, done.stderr
        assert out.read_bytes() == reference[0]
        assert cluster_up()  # the driver left; the cluster it joined runs on
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # --block: the head stops the Ray processes it started
        head.wait(60)
        shutil.rmtree(temp, ignore_errors=True)
    left = Path("/tmp/ray/ray_current_cluster")
    assert not left.exists() or address not in left.read_text()
