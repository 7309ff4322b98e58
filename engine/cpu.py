"""What this CPU is, as far as choosing graphs goes: its model name and instruction sets.

The int8 graphs come in two weight widths (export/quantize.py). onnxruntime's uint8 x int8
kernel on plain AVX2 (and AVX-512 without VNNI) adds pairs of products into 16 bits with
saturation, which 8-bit weights overflow, so the ``int8`` graphs use 7-bit weights. With VNNI
(AVX-512 or AVX) or AMX the kernel adds the products straight into 32 bits: nothing
saturates, and the ``int8w8`` graphs' 8-bit weights are a third closer to fp32 at the same
speed (docs/BENCHMARKS.md). ``int8_variant`` picks the one this CPU runs exactly.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from pathlib import Path

from engine.defaults import INT8_GRAPHS

# Instruction sets whose int8 dot products accumulate in 32 bits (no int16 saturation).
EXACT_INT8 = ("avx512_vnni", "avx_vnni", "amx_int8")
CPUINFO = Path("/proc/cpuinfo")


def cpu_info(cpuinfo: Path = CPUINFO) -> tuple[str, frozenset[str]]:
    """The CPU's model name and its flags (Linux's /proc/cpuinfo, first processor: every core of
    a machine has the same); elsewhere the platform's processor name and no flags."""
    name, flags = platform.processor() or platform.machine(), frozenset[str]()
    try:
        lines = cpuinfo.read_text().split("\n\n")[0].splitlines()
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("flags"):
            flags = frozenset(line.split(":", 1)[1].split())
    return name, flags


def exact_int8(flags: Iterable[str] | None = None) -> bool:
    """Whether a CPU with ``flags`` (this one's by default) adds int8 products into 32 bits."""
    return bool(set(cpu_info()[1] if flags is None else flags) & set(EXACT_INT8))


def int8_variant(variants: Iterable[str], flags: Iterable[str] | None = None, choice: str = "auto") -> str | None:
    """The int8 graph variant to run on a CPU with ``flags`` (this one's by default), of the
    package's ``variants``. ``choice`` auto: ``int8w8`` where int8 products cannot saturate and the
    package has it, else ``int8``; None when the package has neither. ``int8`` or ``int8w8``: that
    one, or ValueError saying why it cannot be served (the package lacks it; 8-bit weights on a
    CPU whose products saturate)."""
    have = set(variants)
    exact = exact_int8(flags)
    if choice == "auto":
        if exact and "int8w8" in have:
            return "int8w8"
        return "int8" if "int8" in have else None
    if choice not in INT8_GRAPHS:
        raise ValueError(f"int8 graphs {choice!r}: choose one of {', '.join(INT8_GRAPHS)}")
    if choice not in have:
        raise ValueError(f"the package has no {choice} graphs (it has {', '.join(sorted(have))}); export it "
                         f"again with nmt-export --int8, or choose auto")
    if choice == "int8w8" and not exact:
        raise ValueError("int8w8 graphs on a CPU without VNNI or AMX: its int8 products saturate with 8-bit "
                         "weights and the translations would be wrong; choose int8 or auto")
    return choice
