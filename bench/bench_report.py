"""``nmt-bench`` results as text: the machine, the table (terminal and Markdown), the chart."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

VERSIONED = ("torch", "onnxruntime", "ctranslate2", "numpy", "grpcio")


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "versions": versions}


def config_name(row: dict[str, Any]) -> str:
    return f"{row['mode']} bs{row['batch_size']}"


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


COLUMNS = ("engine", "mode", "batch", "sent/s", "tok/s", "lat mean ms", "p50 ms", "p90 ms", "peak RSS Δ MiB",
           "BLEU", "same text")


def cells(row: dict[str, Any]) -> list[str]:
    if row.get("error"):
        return [row["engine"], row["mode"], str(row["batch_size"]), "error: " + row["error"][:60],
                *[""] * (len(COLUMNS) - 4)]
    lat = row["latency_ms"]
    same = row.get("identical_to_reference")
    return [row["engine"], row["mode"], str(row["batch_size"]), fmt(row["sentences_per_s"], 2),
            fmt(row["tokens_per_s"], 0), fmt(lat["mean"]), fmt(lat["p50"]), fmt(lat["p90"]),
            fmt(row["peak_rss_delta_mib"], 0), fmt(row["bleu"], 2),
            "–" if same is None else f"{100 * same:.0f}%"]


def text_table(rows: list[dict[str, Any]]) -> str:
    table = [list(COLUMNS), *[cells(r) for r in rows]]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
                     for line in table)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |"
    rule = "|" + "|".join("---" if i < 2 else "---:" for i in range(len(COLUMNS))) + "|"
    return "\n".join([head, rule, *("| " + " | ".join(cells(r)) + " |" for r in rows)])


def chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if not r.get("error")]
    configs = list(dict.fromkeys(config_name(r) for r in ok))
    cols = min(2, len(configs))
    n_rows = -(-len(configs) // cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(5.2 * cols, 3.2 * n_rows), squeeze=False)
    for ax in axes.flat[len(configs):]:
        ax.set_visible(False)
    for ax, config in zip(axes.flat, configs):
        sel = [r for r in ok if config_name(r) == config]
        names = [r["engine"] for r in sel]
        values = [r["sentences_per_s"] for r in sel]
        colours = ["#d62728" if n.startswith(("onnx", "server")) else "#1f77b4" if n.startswith("ct2") else "#7f7f7f"
                   for n in names]
        ax.barh(names[::-1], values[::-1], color=colours[::-1])
        for y, v in enumerate(values[::-1]):
            ax.text(v, y, f" {v:.1f}", va="center", fontsize=8)
        ax.set_title(config, fontsize=10)
        ax.set_xlabel("sentences / s")
        ax.set_xlim(0, max(values) * 1.25 if values else 1)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
