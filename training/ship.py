"""Ship a trained model in a directory small enough for the repository.

    python -m training.ship runs/multi6 models/default

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
from pathlib import Path

from training.checkpoint import SUMS_FILE, load, resolve, save_atomic, sha256_file
from training.config import RunConfig


def write_sums(directory: Path) -> None:
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name not in (SUMS_FILE, "README.md"))
    (directory / SUMS_FILE).write_text("".join(f"{sha256_file(p)}  {p.name}\n" for p in files))


def ship(source: str | Path, out: str | Path) -> Path:
    src = resolve(source)
    ckpt = load(src)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = RunConfig.from_dict(ckpt["config"])
    half = {k: (v.half() if v.is_floating_point() else v) for k, v in ckpt["model"].items()}
    shipped = {"model": half, "config": ckpt["config"], "tokenizer_model": ckpt["tokenizer_model"],
               "step": ckpt.get("step"), "source": src.name, "dtype": "float16"}
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
    p.add_argument("source", help="a checkpoint, or a run directory (its average.pt)")
    p.add_argument("out", help="directory to write")
    args = p.parse_args(argv)
    path = ship(args.source, args.out)
    n = sum(v.numel() for v in load(path)["model"].values())  # read back as every command reads it
    print(json.dumps({"wrote": str(path), "parameters": n, "bytes": path.stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
