"""Ship a trained model in a directory small enough for the repository.

    python -m training.ship runs/multi6 models/default
    python -m training.ship runs/gpu-continue runs/stage10 --interpolate models/default --weight 0.7
    python -m training.ship runs/a/checkpoints/step_00001773.pt runs/b/checkpoints/step_00000715.pt out

Several sources ship the element-wise mean of their weights (checkpoint averaging, the paper's
6.1): checkpoints of one lineage, such as the last ones of a run and of the leg that continued
it, which a run's own ``average.pt`` (its last few checkpoints) cannot span. They must hold the
same tensors of the same shapes and the same tokenizer; the config, step and side files are
the last source's, and the shipped checkpoint records the sources' names.

``--interpolate OLD --weight W`` ships W x the source's weights + (1 - W) x OLD's, tensor by tensor
(WiSE-FT, Wortsman et al. 2022): a fine-tune that gained on new text and lost some of the old
gets most of the one back at little of the other. Both must have the same shape, or OLD the shape
the source grew from (``SET='model.n_decoder_layers=4'`` in scripts/train_modern.sh): OLD is then
grown the same way first (training/warm_start.py: its new layers are identities), so the new
layers ship at W x what they learned. The shipped checkpoint records what it was interpolated with.

Writes ``model.pt`` (half-precision weights, the run's config and the tokenizer: a
checkpoint that every command taking a checkpoint accepts), ``config.json`` and
``tokenizer.model`` beside it for people to read, the run's ``curves.png`` and
``history.json`` when present, and ``SHA256SUMS``, which :func:`training.checkpoint.load`
checks before it reads anything from that directory (weights-only, as every checkpoint).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from training.checkpoint import SUMS_FILE, average, load, resolve, save_atomic, sha256_file
from training.config import RunConfig
from training.warm_start import grow


def write_sums(directory: Path) -> None:
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name not in (SUMS_FILE, "README.md"))
    (directory / SUMS_FILE).write_text("".join(f"{sha256_file(p)}  {p.name}\n" for p in files))


def interpolate(new: dict[str, torch.Tensor], old: dict[str, torch.Tensor], weight: float) -> dict[str, torch.Tensor]:
    """weight x new + (1 - weight) x old, tensor by tensor, in float32."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"--weight {weight}: it must be between 0 and 1")
    if new.keys() != old.keys():
        raise ValueError(f"the two models have different tensors: {sorted(new.keys() ^ old.keys())[:4]}")
    shapes = [k for k in new if new[k].shape != old[k].shape]
    if shapes:
        k = shapes[0]
        raise ValueError(f"the two models differ in shape: {k} {tuple(new[k].shape)} against {tuple(old[k].shape)}")
    return {k: weight * v.float() + (1.0 - weight) * old[k].float() if v.is_floating_point() else v
            for k, v in new.items()}


def portable(path: str | Path) -> str:
    """A path as a shipped model may record it: a relative one as it is, an absolute one (of the
    machine that trained it, meaningless anywhere else) by its last component only."""
    return Path(path).name if Path(path).is_absolute() else str(path)


def ship(source: str | Path | Sequence[str | Path], out: str | Path, with_model: str | Path | None = None,
         weight: float = 1.0) -> Path:
    sources = [resolve(x) for x in ([source] if isinstance(source, (str, Path)) else source)]
    if not sources:
        raise ValueError("nothing to ship")
    src = sources[-1]
    ckpt = load(src)
    out = Path(out)
    weights = ckpt["model"]
    extra: dict = {}
    if len(sources) > 1:
        weights = average(sources)
        extra["averaged"] = [portable(p) for p in sources]
    if with_model is not None:
        other = resolve(with_model)
        old = load(other)
        old_weights, grown = grow({k: v.float() for k, v in old["model"].items()},
                                  RunConfig.from_dict(old["config"]).model, RunConfig.from_dict(ckpt["config"]).model,
                                  weights)
        weights = interpolate(weights, old_weights, weight)
        extra["interpolated"] = {"with": portable(other), "weight": weight} | ({"grown": grown} if grown else {})
    out.mkdir(parents=True, exist_ok=True)
    config = {**ckpt["config"]}
    if config.get("train", {}).get("init_from"):
        config["train"] = {**config["train"], "init_from": portable(config["train"]["init_from"])}
    cfg = RunConfig.from_dict(config)
    half = {k: (v.half() if v.is_floating_point() else v) for k, v in weights.items()}
    shipped = {"model": half, "config": config, "tokenizer_model": ckpt["tokenizer_model"],
               "step": ckpt.get("step"), "source": src.name, "dtype": "float16", **extra}
    save_atomic(shipped, out / "model.pt")
    cfg.save(out / "config.json")
    (out / "tokenizer.model").write_bytes(ckpt["tokenizer_model"])
    run_dir = src.parent.parent if src.parent.name == "checkpoints" else src.parent
    for name in ("curves.png", "history.json"):
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, out / name)
    write_sums(out)
    return out / "model.pt"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", nargs="+", help="a checkpoint, or a run directory (its average.pt); several: their mean")
    p.add_argument("out", help="directory to write")
    p.add_argument("--interpolate", metavar="OLD", help="a model to interpolate with (a checkpoint or directory)")
    p.add_argument("--weight", type=float, default=0.5, help="the source's share with --interpolate (default: 0.5)")
    args = p.parse_args(argv)
    try:
        path = ship(args.source, args.out, args.interpolate, args.weight if args.interpolate else 1.0)
    except ValueError as e:
        p.error(str(e))
    n = sum(v.numel() for v in load(path)["model"].values())  # read back as every command reads it
    print(json.dumps({"wrote": str(path), "parameters": n, "bytes": path.stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
