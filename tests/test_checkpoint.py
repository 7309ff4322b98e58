"""Checkpoint files (training/checkpoint.py): read weights-only, so nothing a checkpoint holds is
ever run; a file whose pickle would run code is refused in one line, with or without a SHA256SUMS
beside it, and the shipped model and training checkpoints (optimizer, RNG states) still load."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training import checkpoint as ckpt_io
from training.ship import write_sums

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "models" / "default" / "model.pt"


class Payload:
    """What a hostile checkpoint carries: unpickling it writes ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def evil_checkpoint(path: Path, marker: Path) -> Path:
    """A file shaped like a checkpoint of ours whose pickle runs code when loaded."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {"w": torch.zeros(2)}, "config": {"payload": Payload(marker)}}, path)
    return path


def refusal(path: Path) -> str:
    return (f"{path} is refused: its pickle asks for the Python object exec; a checkpoint may hold only tensors "
            "and plain data, and nothing in it was run")


def test_a_checkpoint_that_runs_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "marker"
    path = evil_checkpoint(tmp_path / "evil.pt", marker)
    with pytest.raises(ValueError) as err:
        ckpt_io.load(path)
    assert str(err.value) == refusal(path)
    assert not marker.exists()


def test_a_matching_sha256sums_does_not_make_it_safe(tmp_path):
    """The sums say the file is the one shipped, not that it is harmless."""
    marker = tmp_path / "marker"
    shipped = tmp_path / "shipped"
    evil_checkpoint(shipped / "model.pt", marker)
    write_sums(shipped)
    with pytest.raises(ValueError) as err:
        ckpt_io.load_model(shipped)
    assert str(err.value) == refusal(shipped / "model.pt")
    assert not marker.exists()


def test_nmt_export_refuses_it_in_one_line(tmp_path):
    marker = tmp_path / "marker"
    path = evil_checkpoint(tmp_path / "evil.pt", marker)
    r = subprocess.run([sys.executable, "-m", "export.onnx_export", str(path), str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (r.returncode, r.stderr) == (2, f"nmt-export: error: cannot export {path}: {refusal(path)}\n")
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_what_is_not_a_checkpoint_dict_is_refused(tmp_path):
    path = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), path)
    with pytest.raises(ValueError) as err:
        ckpt_io.load(path)
    assert str(err.value) == f"{path} is not a checkpoint of this project (it holds a Tensor, not a dict)"


def test_the_shipped_model_loads_weights_only():
    model, cfg, ckpt = ckpt_io.load_model(DEFAULT_MODEL)
    assert ckpt["dtype"] == "float16" and cfg.model.vocab_size == model.embedding.weight.shape[0]
    assert ckpt_io.load_tokenizer(ckpt).vocab_size == cfg.model.vocab_size


def test_a_training_checkpoints_resume_state_reads_back_weights_only(tmp_path):
    """What train.py saves for a resume (optimizer, Python and torch RNG states, history) is
    plain data: it loads weights-only and restores the same random streams."""
    from training.train import rng_state, set_rng_state

    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    random.seed(7)
    torch.manual_seed(7)
    path = tmp_path / "checkpoints" / "step_00000001.pt"
    ckpt_io.save_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": [rng_state()],
                         "stream": {"epoch": 0, "index": 1}, "step": 1, "elapsed": 0.5,
                         "history": [{"step": 1, "loss": 2.5, "dev_bleu": None}], "config": {},
                         "tokenizer_model": b"\x00"}, path)
    expected = (random.random(), torch.rand(3))
    ckpt = ckpt_io.load(path)
    set_rng_state(ckpt["rng"][0])
    got = (random.random(), torch.rand(3))
    assert got[0] == expected[0] and torch.equal(got[1], expected[1])
    again = torch.optim.Adam(torch.nn.Linear(4, 3).parameters())
    again.load_state_dict(ckpt["optimizer"])
    assert torch.equal(again.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
