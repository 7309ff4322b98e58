"""Cross-attention heatmaps, as in the paper's figures: target pieces down, source pieces across."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clients.client import Hypothesis


def attention_matrix(hyp: Hypothesis) -> np.ndarray:
    """(target pieces, source pieces) weights; each row is one target piece's attention."""
    m = np.asarray(hyp.attention, dtype=np.float32).reshape(len(hyp.target_pieces), len(hyp.source_pieces))
    return m


def draw_attention(hyp: Hypothesis, path: str | Path, title: str = "") -> np.ndarray:
    """Write the heatmap of ``hyp``'s cross-attention to a PNG; return the matrix drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = attention_matrix(hyp)
    if m.size == 0:
        raise ValueError("the translation has no attention to draw (empty output)")
    rows, cols = m.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.42 * cols + 2.0), max(3.0, 0.36 * rows + 1.6)))
    image = ax.imshow(m, cmap="viridis", vmin=0.0, vmax=float(m.max()) or 1.0, aspect="auto")
    ax.set_xticks(range(cols), [_label(p) for p in hyp.source_pieces], rotation=60, ha="right", fontsize=9)
    ax.set_yticks(range(rows), [_label(p) for p in hyp.target_pieces], fontsize=9)
    ax.set_xlabel("source pieces")
    ax.set_ylabel("target pieces")
    if title:
        ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="attention weight")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return m


def _label(piece: str) -> str:
    return piece.replace("\u2581", "_")  # SentencePiece's word-start marker, shown plainly
