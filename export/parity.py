"""How far an exported graph may be from PyTorch, and how that is measured.

float32 rounding is relative: onnxruntime's kernels sum in another order than PyTorch's, and
each value comes out a few units in its last place apart, so a model whose log-probabilities
or keys run into the tens or hundreds differs by more in absolute terms than one whose values
stay near 1 (an OPUS-MT-shaped tiny Marian model with random weights: 2.3e-4) while computing
the same function. Each output is therefore judged against its own scale, max |onnx - torch| /
max(1, max |torch|), and the tokens the graphs choose must be PyTorch's wherever PyTorch's
choice is not a tie at that tolerance (as nmt-verify and tests/test_export.py judge a package:
equal tokens, then close log-probabilities).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOLERANCE = 1e-4  # of an output's scale


def _scale(ref: np.ndarray) -> float:
    finite = np.abs(ref[np.isfinite(ref)])
    return max(1.0, float(finite.max(initial=0.0)))


@dataclass
class Worst:
    """The largest difference seen over a graph check's outputs: absolute and over the output's scale."""

    absolute: float = 0.0
    relative: float = 0.0

    def add(self, got: np.ndarray, ref: np.ndarray) -> None:
        """Count one output (same shape); equal infinities (a banned token's -inf) are no difference."""
        got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        diff = np.where(got == ref, 0.0, np.abs(got - ref))
        worst = float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0))
        self.absolute = max(self.absolute, worst)
        self.relative = max(self.relative, worst / _scale(ref))

    def merge(self, other: Worst) -> Worst:
        return Worst(max(self.absolute, other.absolute), max(self.relative, other.relative))

    def refuse_if_apart(self) -> None:
        """RuntimeError when the graphs do not compute PyTorch's function (up to rounding)."""
        if not self.relative <= TOLERANCE:
            raise RuntimeError(f"exported graphs differ from PyTorch by {self.relative:.2e} of their outputs' "
                               f"scale (> {TOLERANCE:.0e}; max |diff| {self.absolute:.2e})")


def same_choices(got: np.ndarray, ref: np.ndarray) -> bool:
    """Whether the (B, V) scores ``got`` pick PyTorch's best token in every row where PyTorch's
    best two are more than the tolerance apart (a near-tie may go either way)."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if ref.shape[-1] < 2:
        return True
    top2 = np.sort(ref, axis=-1)[..., -2:]
    decided = (top2[..., 1] - top2[..., 0]) > 2 * TOLERANCE * _scale(ref)
    return bool(np.all((got.argmax(-1) == ref.argmax(-1)) | ~decided))

