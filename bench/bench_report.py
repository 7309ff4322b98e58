"""``nmt-bench`` results as text: the machine, the table (terminal and Markdown), the server
sweep, the GPU targets and the chart.

    python -m bench.bench_report bench/results/nmt_bench-cuda.json --cpu-json bench/results/nmt_bench-cpu.json

computes the GPU targets of a finished run again (with a CPU reference run after it, say),
prints them and rewrites the Markdown beside the JSON;

    python -m bench.bench_report bench/results/nmt_bench-cpu.json --chart docs/benchmarks-cpu.png

draws a finished run's chart (the one ``nmt-bench --png`` draws) without running it again.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from engine.cpu import cpu_info

VERSIONED = ("torch", "onnxruntime", "ctranslate2", "pymarian", "transformers", "optimum", "numpy", "grpcio")


# The matrix instructions that decide which kernels an engine runs (onnxruntime's MLAS, oneDNN,
# oneMKL): results from CPUs that differ here are not comparable.
INSTRUCTION_SETS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def machine() -> dict[str, Any]:
    """The CPU (model and the matrix instruction sets it has), core count, platform and library versions."""
    cpu, flags = cpu_info()
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"cpu": cpu, "instruction_sets": [f for f in INSTRUCTION_SETS if f in flags], "cores": os.cpu_count(),
            "platform": platform.platform(),
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
CLIENTS_AT = 3  # where the "clients" column goes when the server ran


def has_clients(rows: list[dict[str, Any]]) -> bool:
    return any("clients" in r for r in rows)


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """COLUMNS, with "clients" after "batch" when some row is the server's."""
    cols = list(COLUMNS)
    return [*cols[:CLIENTS_AT], "clients", *cols[CLIENTS_AT:]] if has_clients(rows) else cols


def cells(row: dict[str, Any], clients: bool = False) -> list[str]:
    if row.get("error"):
        out = [row["engine"], row["mode"], str(row["batch_size"]), "error: " + row["error"][:60],
               *[""] * (len(COLUMNS) - 4)]
    else:
        lat = row["latency_ms"]
        same = row.get("identical_to_reference")
        out = [row["engine"], row["mode"], str(row["batch_size"]), fmt(row["sentences_per_s"], 2),
               fmt(row["tokens_per_s"], 0), fmt(lat["mean"]), fmt(lat["p50"]), fmt(lat["p90"]),
               fmt(row["peak_rss_delta_mib"], 0), fmt(row["bleu"], 2),
               "–" if same is None else f"{100 * same:.0f}%"]
    if clients:
        out.insert(CLIENTS_AT, str(row["clients"]) if "clients" in row else "")
    return out


def text_table(rows: list[dict[str, Any]]) -> str:
    cols = columns(rows)
    table = [cols, *[cells(r, has_clients(rows)) for r in rows]]
    return _align(table)


def _align(table: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
                     for line in table).rstrip()


def _markdown(table: list[list[str]], left: int = 2) -> str:
    """Markdown of a table (its first line the heads); the first ``left`` columns left-aligned."""
    head = "| " + " | ".join(table[0]) + " |"
    rule = "|" + "|".join("---" if i < left else "---:" for i in range(len(table[0]))) + "|"
    return "\n".join([head, rule, *("| " + " | ".join(line) + " |" for line in table[1:])])


def markdown_table(rows: list[dict[str, Any]]) -> str:
    return _markdown([columns(rows), *[cells(r, has_clients(rows)) for r in rows]])


# ---------------------------------------------------------------- the server sweep
def _ok(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not r.get("error")]


def offline_reference(rows: list[dict[str, Any]], server_row: dict[str, Any],
                      batch_size: int | None = None) -> dict[str, Any] | None:
    """The offline row of the engine the server ran (onnx-VARIANT, not the resident-forced one),
    same mode, at ``batch_size`` (default: the server row's request size)."""
    variant = server_row.get("variant", "fp32")
    bs = server_row["batch_size"] if batch_size is None else batch_size
    return next((r for r in _ok(rows) if same_graphs(r, variant) and r["mode"] == server_row["mode"]
                 and r["batch_size"] == bs), None)


def same_graphs(row: dict[str, Any], variant: str) -> bool:
    """An offline row ran ``variant``'s graphs: engine onnx-VARIANT, or onnx-int8 where it ran the
    int8 width this CPU runs exactly (int8w8 with VNNI or AMX; its row records the variant)."""
    if "clients" in row or row["engine"] not in (f"onnx-{variant}", "onnx-int8"):
        return False
    return row.get("variant", row["engine"].removeprefix("onnx-")) == variant


def sweep_series(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (mode, request size): the server's sentences/s at each client count (ascending), the
    offline sentences/s of the same engine at the same batch size (None if not run), and its
    largest offline batch (``largest``: (batch size, sentences/s), or None)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in _ok(rows):
        if "clients" not in r:
            continue
        engine = f"onnx-{r.get('variant', 'fp32')}"
        s = out.setdefault((r["mode"], r["batch_size"]), {"points": [], "engine": engine, "offline": None,
                                                          "largest": None})
        s["points"].append((r["clients"], r["sentences_per_s"]))
        ref = offline_reference(rows, r)
        if ref is not None:
            s["offline"] = ref["sentences_per_s"]
        offline = [o for o in _ok(rows) if same_graphs(o, r.get("variant", "fp32")) and o["mode"] == r["mode"]]
        if offline:
            big = max(offline, key=lambda o: o["batch_size"])
            s["largest"] = (big["batch_size"], big["sentences_per_s"])
    for s in out.values():
        s["points"].sort()
    return out


def _sweep_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    series = sweep_series(rows)
    counts = sorted({c for s in series.values() for c, _ in s["points"]})
    table = [["mode", "batch", *[f"{c} client{'s' * (c != 1)}" for c in counts], "offline, same batch",
              "best / offline"]]
    for (mode, bs), s in series.items():
        got = dict(s["points"])
        best = max(got.values())
        ratio = f"{best / s['offline']:.2f}x" if s["offline"] else "–"
        table.append([mode, str(bs), *[fmt(got.get(c), 2) for c in counts],
                      f"{fmt(s['offline'], 2)} ({s['engine']})", ratio])
    return table


def sweep_markdown(rows: list[dict[str, Any]]) -> str:
    """Server sentences/s by client count, one line per mode and request size."""
    return _markdown(_sweep_table(rows))


def text_sweep(rows: list[dict[str, Any]]) -> str:
    return "server sentences/s by concurrent clients\n" + _align(_sweep_table(rows))


# ---------------------------------------------------------------- the GPU targets of the issue
GPU_ENGINE, CPU_ENGINE = "onnx-fp16", "onnx-fp32"
GREEDY_GOAL = 5000.0  # sentences/s, offline greedy at batch 256
CPU_GOAL = 20.0  # x the same engine on one CPU thread
SERVER_GOAL = 0.8  # x offline, 256 clients
BEAM_BASE, BEAM_GOAL = 35.0, 10.0  # beam 4 at batch 32: x 35 sentences/s
TARGET_BATCH, TARGET_CLIENTS, BEAM_BATCH, BEAM_SIZE = 256, 256, 32, 4


def _find(result: dict[str, Any], device: str, **want: Any) -> dict[str, Any] | None:
    """The first error-free row with these fields, run on ``device`` (rows of older runs have no
    "device": theirs is the run's)."""
    for r in _ok(result.get("rows", [])):
        if r.get("device", result.get("device")) == device and all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def _target(name: str, value: float | None, goal: float, unit: str, measured: str, why: str = "") -> dict[str, Any]:
    met = None if value is None else value >= goal
    return {"target": name, "value": None if value is None else round(value, 2), "goal": goal, "unit": unit,
            "measured": measured if value is not None else "", "met": met,
            "status": "met" if met else "NOT met" if met is False else f"not measured: {why}"}


def gpu_targets(result: dict[str, Any], cpu_result: dict[str, Any] | None = None,
                cpu_source: str = "") -> list[dict[str, Any]]:
    """The issue's four targets from a run's rows (onnx-fp16 and the server on cuda), each with the
    measured value, the goal and whether it was met (None: not measured, ``status`` says why).
    The one-CPU-thread reference: onnx-fp32 greedy at batch 256 on the CPU, from ``result`` when
    it has such a row and ran one thread, else from ``cpu_result`` (an earlier CPU run)."""
    out = []
    greedy = _find(result, "cuda", engine=GPU_ENGINE, mode="greedy", batch_size=TARGET_BATCH)
    g = greedy["sentences_per_s"] if greedy else None
    out.append(_target(f"offline greedy, batch {TARGET_BATCH}, {GPU_ENGINE} (sentences/s)", g, GREEDY_GOAL,
                       "sent/s", f"{fmt(g)} sent/s", f"no {GPU_ENGINE} greedy batch {TARGET_BATCH} row on cuda"))

    cpu, source = None, ""
    for res, where in ((result, "this run"), (cpu_result, cpu_source or "--cpu-json")):
        if res is not None and res.get("threads") == 1:
            cpu = _find(res, "cpu", engine=CPU_ENGINE, mode="greedy", batch_size=TARGET_BATCH)
            if cpu:
                source = where
                break
    c = cpu["sentences_per_s"] if cpu else None
    why = (f"no {GPU_ENGINE} greedy batch {TARGET_BATCH} row on cuda" if g is None else
           f"no one-thread CPU run of {CPU_ENGINE} greedy batch {TARGET_BATCH} (give --cpu-json)")
    out.append(_target(f"offline greedy, batch {TARGET_BATCH}: {GPU_ENGINE} / {CPU_ENGINE} on one CPU thread",
                       g / c if g and c else None, CPU_GOAL, "x",
                       f"{fmt(g / c if g and c else None, 1)}x ({fmt(g)} / {fmt(c, 2)} sent/s, CPU: {source})", why))

    servers = sorted((r for r in _ok(result.get("rows", [])) if r["engine"] == "server" and r["mode"] == "greedy"
                      and r.get("clients") == TARGET_CLIENTS and r.get("device", result.get("device")) == "cuda"),
                     key=lambda r: r["batch_size"])
    server = servers[0] if servers else None
    offline = offline_reference(result.get("rows", []), server, TARGET_BATCH) if server else None
    s, o = (server["sentences_per_s"] if server else None), (offline["sentences_per_s"] if offline else None)
    why = (f"no offline onnx-{server.get('variant', 'fp32')} greedy batch {TARGET_BATCH} row" if server else
           f"no greedy server row at {TARGET_CLIENTS} clients on cuda")
    out.append(_target(f"server at {TARGET_CLIENTS} clients / offline, greedy batch {TARGET_BATCH}",
                       s / o if s and o else None, SERVER_GOAL, "x",
                       f"{fmt(s / o if s and o else None, 2)}x ({fmt(s)} / {fmt(o)} sent/s; requests of "
                       f"{server['batch_size'] if server else '?'} text(s))", why))

    beam = (_find(result, "cuda", engine=GPU_ENGINE, mode="beam", batch_size=BEAM_BATCH)
            if result.get("beam_size") == BEAM_SIZE else None)
    b = beam["sentences_per_s"] if beam else None
    out.append(_target(f"beam {BEAM_SIZE}, batch {BEAM_BATCH}, {GPU_ENGINE} / {BEAM_BASE:.0f} sentences/s",
                       b / BEAM_BASE if b else None, BEAM_GOAL, "x", f"{fmt(b / BEAM_BASE if b else None, 1)}x "
                       f"({fmt(b)} sent/s)", f"no {GPU_ENGINE} beam {BEAM_SIZE} batch {BEAM_BATCH} row on cuda"))
    return out


def _goal(t: dict[str, Any]) -> str:
    return f">= {t['goal']:,.0f} sent/s" if t["unit"] == "sent/s" else f">= {t['goal']:g}x"


def targets_markdown(targets: list[dict[str, Any]]) -> str:
    return _markdown([["target", "measured", "goal", "status"],
                      *[[t["target"], t["measured"] or "–", _goal(t), t["status"]] for t in targets]], left=4)


def text_targets(targets: list[dict[str, Any]]) -> str:
    met = sum(1 for t in targets if t["met"])
    lines = [f"GPU targets: {met} of {len(targets)} met"]
    for t in targets:
        status, _, why = t["status"].partition(": ")
        lines.append(f"  [{status}] {t['target']}: {t['measured'] or '–'} (goal {_goal(t)})"
                     + (f": {why}" if why else ""))
    return "\n".join(lines)


def kernels_text(kernels: dict[str, str]) -> str:
    """CTranslate2's kernels in one phrase: "ISA AVX2, oneMKL false, float products DNNL, int8 products DNNL"."""
    names = (("isa", "ISA"), ("mkl", "oneMKL"), ("sgemm", "float products"), ("gemm_s8", "int8 products"))
    return ", ".join(f"{label} {kernels[key]}" for key, label in names if key in kernels)


def kernels_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per engine that reported the kernels it chose (CTranslate2), in row order."""
    seen: dict[str, str] = {}
    for r in _ok(rows):
        if r.get("kernels"):
            seen.setdefault(r["engine"], kernels_text(r["kernels"]))
    return [f"{engine} kernels: {text}" for engine, text in seen.items()]


def markdown(result: dict[str, Any]) -> str:
    """The Markdown nmt-bench writes beside its JSON: the table, the kernels CTranslate2 chose, the
    server sweep (more than one client count) and the GPU targets (when computed)."""
    rows = result.get("rows", [])
    parts = [markdown_table(rows)]
    if kernels := kernels_lines(rows):
        parts.append("\n".join(f"- {line}" for line in kernels))
    if len({r["clients"] for r in _ok(rows) if "clients" in r}) > 1:
        parts += ["Server sentences/s by concurrent clients (each client sends one request at a time):",
                  sweep_markdown(rows)]
    if "targets" in result:
        parts += ["GPU targets:", targets_markdown(result["targets"])]
    return "\n\n".join(parts) + "\n"


def chart_title(result: dict[str, Any]) -> str:
    """The chart's title: sentences, threads, device and the machine (its GPU, or its CPU and cores)."""
    m = result["machine"]
    where = m.get("gpu") or f"{m['cpu']} ({m['cores']} cores)"
    return f"{result['sentences']} sentences, {result['threads']} thread(s), {result['device']}: {where}"


def chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """sentences/s of every engine, one panel per mode and batch size; with a server sweep (more
    than one client count) a last row of panels: server sentences/s against clients, per mode,
    one line per request size, the offline engine at that batch size dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = _ok(rows)
    configs = list(dict.fromkeys(config_name(r) for r in ok))
    series = sweep_series(rows)
    sweep = len({c for s in series.values() for c, _ in s["points"]}) > 1
    sweep_modes = list(dict.fromkeys(mode for mode, _ in series)) if sweep else []
    cols = max(1, min(2, len(configs)), len(sweep_modes))
    bar_rows = -(-len(configs) // cols)
    n_rows = bar_rows + (1 if sweep_modes else 0)
    fig, axes = plt.subplots(max(1, n_rows), cols, figsize=(5.2 * cols, 3.2 * max(1, n_rows)), squeeze=False)
    bar_axes = list(axes.flat[:bar_rows * cols])
    for ax in bar_axes[len(configs):]:
        ax.set_visible(False)
    for ax, config in zip(bar_axes, configs):
        sel = [r for r in ok if config_name(r) == config]
        names = [f"{r['engine']} ({r['clients']} clients)" if sweep and "clients" in r else r["engine"] for r in sel]
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
    if sweep_modes:
        sweep_axes = list(axes[-1])
        for ax in sweep_axes[len(sweep_modes):]:
            ax.set_visible(False)
        for ax, mode in zip(sweep_axes, sweep_modes):
            largest: set[tuple[str, int, float] | None] = set()
            for n, (bs, s) in enumerate((k[1], v) for k, v in series.items() if k[0] == mode):
                colour = f"C{n}"
                xs, ys = zip(*s["points"])
                ax.plot(xs, ys, marker="o", color=colour, label=f"server, requests of {bs}")
                if s["offline"]:
                    ax.axhline(s["offline"], color=colour, linestyle="--", linewidth=1,
                               label=f"{s['engine']} offline, batch {bs}")
                largest.add((s["engine"], *s["largest"]) if s["largest"] and s["largest"][0] != bs else None)
            for engine, bs, sps in sorted(x for x in largest if x):
                ax.axhline(sps, color="#7f7f7f", linestyle=":", linewidth=1, label=f"{engine} offline, batch {bs}")
            ax.set_xscale("log", base=2)
            counts = sorted({c for (m, _), s in series.items() if m == mode for c, _ in s["points"]})
            ax.set_xticks(counts, [str(c) for c in counts])
            ax.minorticks_off()
            ax.set_title(f"server sweep, {mode}", fontsize=10)
            ax.set_xlabel("concurrent clients")
            ax.set_ylabel("sentences / s")
            ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("result", type=Path, help="the JSON nmt-bench wrote (a cuda run, unless --chart)")
    p.add_argument("--cpu-json", type=Path, help="an earlier one-thread CPU run with onnx-fp32 greedy batch 256")
    p.add_argument("--chart", type=Path, help="only draw the result's chart (any run) into this PNG, as nmt-bench "
                                              "--png would have")
    args = p.parse_args(argv)
    result = json.loads(args.result.read_text(encoding="utf-8"))
    if args.chart:
        chart(result["rows"], args.chart, chart_title(result))
        print(f"chart: {args.chart}")
        return 0
    cpu = json.loads(args.cpu_json.read_text(encoding="utf-8")) if args.cpu_json else None
    result["targets"] = gpu_targets(result, cpu, str(args.cpu_json or ""))
    args.result.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    args.result.with_suffix(".md").write_text(markdown(result))
    print(text_targets(result["targets"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
