"""engine/cpu.py: the CPU's name and flags, and the int8 weight width it runs exactly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from cli.settings import ConfigError
from engine.cpu import cpu_info, exact_int8, int8_variant
from engine.package import ModelPackage
from engine.runtime import Runtime, RuntimeOptions
from export.quantize import WEIGHT_MAX, WEIGHT_MAX_EXACT
from server.config import ServerConfig, parse_args

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse avx2 fma avx512f avx512_vnni amx_int8

processor\t: 1
model name\t: something else
flags\t\t: fpu
"""


def test_the_first_processors_name_and_flags_are_read(tmp_path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    name, flags = cpu_info(tmp_path / "cpuinfo")
    assert name == "Intel(R) Xeon(R) Platinum 8480+"
    assert flags == {"fpu", "sse", "avx2", "fma", "avx512f", "avx512_vnni", "amx_int8"}
    assert cpu_info(tmp_path / "missing")[1] == frozenset()  # not Linux: no flags, so 7-bit weights


def test_8_bit_weights_only_where_int8_products_cannot_saturate():
    both = ("fp32", "int8", "int8w8")
    assert int8_variant(both, {"avx2", "fma", "avx512f"}) == "int8"  # AVX2 / AVX-512 without VNNI: saturates
    assert int8_variant(both, {"avx2", "avx512f", "avx512_vnni"}) == "int8w8"
    assert int8_variant(both, {"avx2", "avx_vnni"}) == "int8w8"
    assert int8_variant(both, {"amx_int8"}) == "int8w8"
    assert int8_variant(("fp32", "int8"), {"avx512_vnni"}) == "int8"  # a package exported before int8w8
    assert int8_variant(("fp32",), {"avx512_vnni"}) is None


def test_one_width_can_be_chosen_and_8_bits_are_refused_where_they_saturate():
    both = ("fp32", "int8", "int8w8")
    assert int8_variant(both, {"avx512_vnni"}, choice="int8") == "int8"  # the same answers on every CPU
    assert int8_variant(both, {"avx512_vnni"}, choice="int8w8") == "int8w8"
    assert int8_variant(both, {"avx2"}, choice="int8") == "int8"
    with pytest.raises(ValueError, match=r"^int8w8 graphs on a CPU without VNNI or AMX: its int8 products saturate"):
        int8_variant(both, {"avx2", "avx512f"}, choice="int8w8")
    with pytest.raises(ValueError, match=r"^the package has no int8w8 graphs \(it has fp32, int8\); export it again"):
        int8_variant(("fp32", "int8"), {"avx512_vnni"}, choice="int8w8")
    with pytest.raises(ValueError, match=r"^int8 graphs .int4.: choose one of auto, int8, int8w8$"):
        int8_variant(both, {"avx512_vnni"}, choice="int4")


def test_nmt_serve_takes_one_width_with_int8_only():
    assert parse_args(["--model", "x"]).int8_graphs == "auto"
    assert parse_args(["--model", "x", "--int8-graphs", "int8"]).int8_graphs == "int8"
    with pytest.raises(ConfigError, match=r"^--int8-graphs is 'w9'; it must be auto, int8 or int8w8$"):
        ServerConfig(int8_graphs="w9")
    with pytest.raises(ConfigError, match=r"^--int8-graphs int8 chooses int8 graphs, but --int8 is off$"):
        ServerConfig(int8=False, int8_graphs="int8")


def test_the_runtime_serves_the_width_this_cpu_runs_exactly(tiny_package):
    package = ModelPackage.load(tiny_package)
    assert Runtime(package, RuntimeOptions("cpu", 1, int8=True)).variant == int8_variant(package.variants)
    assert Runtime(package, RuntimeOptions("cpu", 1, variant="int8")).variant == "int8"  # forced
    assert Runtime(package, RuntimeOptions("cpu", 1, int8=True, int8_graphs="int8")).variant == "int8"
    if exact_int8():
        assert Runtime(package, RuntimeOptions("cpu", 1, int8=True, int8_graphs="int8w8")).variant == "int8w8"
    else:
        with pytest.raises(ValueError, match=r"^int8w8 graphs on a CPU without VNNI or AMX"):
            Runtime(package, RuntimeOptions("cpu", 1, int8=True, int8_graphs="int8w8"))


def test_exported_weights_use_7_and_8_bits(tiny_package):
    for name, most in (("decoder.int8.onnx", WEIGHT_MAX), ("decoder.int8w8.onnx", WEIGHT_MAX_EXACT)):
        weights = [numpy_helper.to_array(i) for i in onnx.load(str(tiny_package / name)).graph.initializer
                   if i.name.endswith(".w_q")]
        assert weights and max(int(np.abs(w.astype(np.int32)).max()) for w in weights) == most, name
