"""The generated gRPC modules match the .proto (regenerate with: python -m protos.generate)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_modules_are_fresh():
    r = subprocess.run([sys.executable, "-m", "protos.generate", "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_stale_modules_are_detected(tmp_path, monkeypatch):
    from protos import generate

    fake_root = tmp_path / "protos"
    (fake_root / "nmt" / "v1").mkdir(parents=True)
    (fake_root / "nmt" / "v1" / "translator.proto").write_text((ROOT / "protos" / generate.PROTO).read_text())
    for name in generate.OUTPUTS:
        (fake_root / "nmt" / "v1" / name).write_text("# stale\n")
    monkeypatch.setattr(generate, "ROOT", fake_root)
    assert generate.main(["--check"]) == 1
