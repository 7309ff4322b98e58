"""What sharing a source's cross keys/values among a job's beams saves in one decoder step.

    python -m bench.studies.shared_sources --package packages/default --rows 4,128 --group 4

A batch whose jobs all search with ``k`` beams holds one copy of each source for its ``k`` rows
(engine/decoding.py, ``Batch.group``); a batch that mixes beam sizes holds one per row. The same
decoder graph is fed both layouts of the same values (random, ``--source`` positions, ``--past``
cached slots), alternately, ``--rounds`` times; each figure is the best round. The outputs must
be the same bits: each (row, head) runs the same one-row product either way.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

import numpy as np


def layouts(dims, rows: int, group: int, past: int, source: int, seed: int = 0
            ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Decoder-step feeds with rows // group shared sources, and the same with each source repeated per row."""
    from engine import contract

    rng = np.random.default_rng(seed)
    n = dims.n_decoder_layers
    base = {contract.INPUT_IDS: rng.integers(10, dims.vocab_size, (rows, 1)),
            contract.POSITIONS: np.full((rows, 1), past, dtype=np.int64),
            contract.PAST_MASK: np.ones((rows, past), dtype=bool),
            contract.SRC_MASK: np.ones((rows, source), dtype=bool)}
    for name, count, length in ((contract.PAST_K, rows, past), (contract.PAST_V, rows, past),
                                (contract.CROSS_K, rows // group, source), (contract.CROSS_V, rows // group, source)):
        shape = contract.kv_shape(name, count, dims.n_heads, dims.d_head, length)
        for layer_name in contract.per_layer(name, n):
            base[layer_name] = rng.standard_normal(shape, dtype=np.float32)
    cross = set(contract.per_layer(contract.CROSS_K, n) + contract.per_layer(contract.CROSS_V, n))
    tiled = {k: np.repeat(v, group, axis=0) if k in cross else v for k, v in base.items()}
    return base, tiled


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", type=Path, required=True)
    p.add_argument("--variants", default="fp32,int8", help="int8: the variant the CPU would run (int8w8 where exact)")
    p.add_argument("--rows", default="4,128", help="rows per step (comma-separated), multiples of --group")
    p.add_argument("--group", type=int, default=4, help="rows per source: the beam size")
    p.add_argument("--source", type=int, default=32, help="source positions")
    p.add_argument("--past", type=int, default=16, help="cached slots")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)

    from bench.engines import variant_options
    from bench.studies.step_cost import best_per_call
    from engine.package import ModelPackage
    from engine.runtime import Runtime, RuntimeOptions

    package = ModelPackage.load(args.package)
    print(f"decoder step, {args.group} rows per source, source {args.source}, {args.past} cached slots, "
          f"{args.threads} thread(s), best of {args.rounds} alternating rounds")
    print(f"{'variant':>8s} {'rows':>5s} {'one per row ms':>15s} {'shared ms':>10s} {'speed-up':>9s} "
          f"{'same bits':>10s}")
    for name in args.variants.split(","):
        rt = Runtime(package, RuntimeOptions(device="cpu", threads=args.threads, **variant_options(name)))
        for rows in (int(r) for r in args.rows.split(",")):
            if rows % args.group:
                p.error(f"--rows {rows} is not a multiple of --group {args.group}")
            shared, tiled = layouts(package.dims, rows, args.group, args.past, args.source)
            best = best_per_call({"tiled": partial(rt.decoder.run, None, tiled),
                                  "shared": partial(rt.decoder.run, None, shared)}, args.rounds, max(10, 3000 // rows))
            same = all(np.array_equal(a, b) for a, b in zip(rt.decoder.run(None, shared), rt.decoder.run(None, tiled)))
            a, b = 1000 * best["tiled"], 1000 * best["shared"]
            print(f"{rt.variant:>8s} {rows:5d} {a:15.3f} {b:10.3f} {a / b:8.2f}x {same!s:>10s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
