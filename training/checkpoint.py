"""Checkpoint files: save, find, load, rebuild the model, average.

A checkpoint is self-describing: it holds the run's config (the model is rebuilt from
it) and the bytes of the SentencePiece model, so evaluation and export need nothing
else. Training checkpoints also hold the optimizer, the data stream position and the
RNG states so that a resumed run continues exactly where it stopped.

Checkpoints are read with ``torch.load(weights_only=True)``: everything one holds is tensors
and plain data (dicts, lists, tuples, str, bytes, numbers, None: the optimizer's state, the
Python ``random`` state tuple, torch's RNG ByteTensors), so no allow-list is needed, and a file
whose pickle would import or call anything else is refused before any of it runs.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from training.config import RunConfig
from training.model import Transformer
from training.tokenizer import Tokenizer

_STEP_FILE = re.compile(r"step_(\d+)\.pt$")
SUMS_FILE = "SHA256SUMS"  # beside a shipped model: checked before the file is unpickled


def checkpoint_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def list_checkpoints(out_dir: str | Path) -> list[Path]:
    """Training checkpoints of a run, oldest first."""
    d = checkpoint_dir(out_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _STEP_FILE.search(p.name))]
    return [p for _, p in sorted(found)]


def save_atomic(obj: dict[str, Any], path: str | Path) -> None:
    """Write to a temporary name and rename, so a killed run never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    verify_sha256(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"{path} is refused: {_unsafe_reason(str(e))}; a checkpoint may hold only tensors and "
                         "plain data, and nothing in it was run") from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path} is not a checkpoint of this project (it holds a {type(ckpt).__name__}, not a dict)")
    for key in ("model", "config"):
        if key not in ckpt:
            raise ValueError(f"{path} is not a checkpoint of this project (no {key!r} entry)")
    return ckpt


def _unsafe_reason(message: str) -> str:
    """One line out of torch's many-line weights-only refusal: what the pickle asked for."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", message)
    if found:
        return f"its pickle asks for the Python object {found.group(1)}"
    found = re.search(r"WeightsUnpickler error: ([^\n]+)", message)
    return f"its pickle is not weights-only ({(found.group(1) if found else message.strip().splitlines()[0]).strip()})"


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify_sha256(path: Path) -> None:
    """When a SHA256SUMS file lies beside ``path`` (a shipped model), ``path`` must be listed in
    it with the right digest: a corrupt or swapped file fails here, before torch unpickles it."""
    sums = path.parent / SUMS_FILE
    if not sums.is_file():
        return
    listed = {}
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        listed[name.strip()] = digest.strip()
    if path.name not in listed:
        raise ValueError(f"{path} is not listed in {sums}")
    digest = sha256_file(path)
    if digest != listed[path.name]:
        raise ValueError(f"{path}: sha256 {digest} does not match {listed[path.name]} in {sums}; "
                         "the file is corrupt or was replaced")


def resolve(path: str | Path) -> Path:
    """A checkpoint file, a shipped model's directory (its model.pt), or a run directory (its
    averaged model if any, else its last checkpoint)."""
    path = Path(path)
    if path.is_dir():
        for name in ("model.pt", "average.pt"):
            if (path / name).is_file():
                return path / name
        found = list_checkpoints(path)
        if not found and (path / "model.json").is_file():
            raise FileNotFoundError(f"{path} is a model package, not a checkpoint: give the run directory of "
                                    "nmt-train or a .pt checkpoint")
        if not found:
            raise FileNotFoundError(f"{path} holds no checkpoint (model.pt, average.pt or checkpoints/step_*.pt): "
                                    "give the run directory of nmt-train or a .pt checkpoint")
        return found[-1]
    return path


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[Transformer, RunConfig, dict[str, Any]]:
    """Rebuild the model from a checkpoint's own config and load its weights (eval mode)."""
    ckpt = load(resolve(path))
    model, cfg = model_from(ckpt, device)
    return model, cfg, ckpt


def model_from(ckpt: dict[str, Any], device: str | torch.device = "cpu") -> tuple[Transformer, RunConfig]:
    """The model (eval mode) and config of a checkpoint already loaded with ``load``."""
    cfg = RunConfig.from_dict(ckpt["config"])
    model = Transformer(cfg.model)
    model.load_state_dict({k: v.float() for k, v in ckpt["model"].items()})
    return model.to(device).eval(), cfg


def load_tokenizer(ckpt: dict[str, Any]) -> Tokenizer:
    """The SentencePiece model stored inside a checkpoint."""
    return Tokenizer(model_proto=ckpt["tokenizer_model"])


def average(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights of several checkpoints (paper, 6.1), each read once;
    ValueError with the first difference when they are not checkpoints of one model (another
    tokenizer, other tensors or shapes)."""
    if not paths:
        raise ValueError("nothing to average")
    total: dict[str, torch.Tensor] = {}
    tokenizer = None
    for i, p in enumerate(paths):
        ckpt = load(p)
        state = ckpt["model"]
        if i == 0:
            tokenizer = ckpt.get("tokenizer_model")
        elif ckpt.get("tokenizer_model") != tokenizer:
            raise ValueError(f"{p.name} has another tokenizer than {paths[0].name}: only checkpoints of one model "
                             "can be averaged")
        elif state.keys() != total.keys():
            raise ValueError(f"{p.name} and {paths[0].name} hold different tensors: "
                             f"{sorted(state.keys() ^ total.keys())[:4]}")
        for k, v in state.items():
            if k in total and v.shape != total[k].shape:
                raise ValueError(f"{p.name} and {paths[0].name} differ in shape: {k} {tuple(v.shape)} against "
                                 f"{tuple(total[k].shape)}")
            total[k] = total.get(k, torch.zeros_like(v, dtype=torch.float64)) + v.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}
