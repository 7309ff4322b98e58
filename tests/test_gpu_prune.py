"""scripts/gpu_prune.py: GPU code for other architectures zeroed in place, the kept architecture's intact."""

from __future__ import annotations

import importlib.util
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_prune", ROOT / "scripts" / "gpu_prune.py")
gpu_prune = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_prune)


def entry(kind: int, arch: int, payload: bytes) -> bytes:
    """One fat-binary entry: a 64-byte header (kind, version, header size, payload size, ..., arch at 28)."""
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, kind, 0x101, 64, len(payload))
    struct.pack_into("<I", head, gpu_prune.ARCH_AT, arch)
    return bytes(head) + payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_only_the_kept_architecture_and_ptx_it_can_compile_survive(tmp_path):
    sm80, sm90, sm120 = b"\x80" * 40, b"\x90" * 56, b"\x12" * 24
    ptx80, ptx120 = b"ptx-80" * 3, b"ptx-120" * 3
    blob = (b"ELF-host-code" + struct.pack("<I", 0xBA55ED50) + b"not a header" +
            fatbin(entry(2, 80, sm80), entry(2, 90, sm90), entry(1, 80, ptx80), entry(1, 120, ptx120),
                   entry(2, 120, sm120)) + b"tail")
    data = bytearray(blob)
    assert gpu_prune.prune(data, {90}) == {"zeroed": len(sm80) + len(ptx120) + len(sm120),
                                           "kept": len(sm90) + len(ptx80)}
    assert len(data) == len(blob)
    assert bytes(data).count(sm90) == 1 and bytes(data).count(ptx80) == 1
    for gone in (sm80, sm120, ptx120):
        assert gone not in bytes(data)
    assert data.startswith(b"ELF-host-code") and data.endswith(b"tail")

    src, dst = tmp_path / "lib.so", tmp_path / "pruned.so"
    src.write_bytes(blob)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_prune.py"), str(src), str(dst), "--keep", "90"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert dst.read_bytes() == bytes(data)
    assert run.stdout == f"{dst}: zeroed 0.0 MB, kept 0.0 MB for [90]\n"


def test_a_library_without_the_architecture_is_refused(tmp_path):
    src = tmp_path / "lib.so"
    src.write_bytes(fatbin(entry(2, 80, b"x" * 8)))
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_prune.py"), str(src), str(tmp_path / "out.so")],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr == f"{src}: no GPU code for [90]; nothing written\n"
    assert not (tmp_path / "out.so").exists()
