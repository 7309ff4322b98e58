"""onnxruntime sessions of one model package: device choice, variant choice, threads.

``auto`` and ``cuda`` try the CUDA provider and fall back to the CPU with one warning
line; ``cpu`` forces the CPU. On the CPU the int8 variant can be chosen; on CUDA the
fp16 variant is used when the package has one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from export import contract
from export.package import ModelPackage
from server.memory import keep_freed_memory

log = logging.getLogger("nmt.server")

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"

# Graph fusions that make the CPU slower. onnxruntime's CPU SkipLayerNormalization kernel
# (residual add + LayerNorm fused) runs ~4.5 ns per element where the plain Add and
# LayerNormalization kernels it replaces take a fraction of that: without the fusion the
# encoder of a 32 x 30 batch took 36 ms instead of 42 (fp32; int8 14 instead of 17), a
# decoder step 7 % less (one-off A/B; docs/BENCHMARKS.md). MatMulScaleFusion folds the
# query's 1/sqrt(d_k) into the score product (FusedMatMul alpha), which takes the CPU
# MatMul off its matrix-vector path for one query row: 68 vs 43 us per layer at 32 rows
# and 32 cached positions (``python -m bench.attention_layout``). CUDA keeps both.
CPU_DISABLED_FUSIONS = ["SkipLayerNormFusion", "MatMulScaleFusion"]


@dataclass(frozen=True)
class RuntimeOptions:
    device: str = "auto"  # auto | cuda | cpu
    threads: int = 0  # CPU intra-op threads; 0 = onnxruntime's default
    int8: bool = False  # on the CPU, use the int8 graphs when the package has them
    variant: str = ""  # force one graph variant (fp32, int8, fp16) instead of choosing by device
    spin: bool = True  # intra-op threads spin between ops: faster alone, slower beside other busy threads


class Runtime:
    """The encoder and decoder-step sessions, and numpy in/out in the contract's names."""

    def __init__(self, package: ModelPackage, options: RuntimeOptions) -> None:
        if options.device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device {options.device!r} must be auto, cuda or cpu")
        keep_freed_memory()  # decoding reallocates large arrays all the time: server/memory.py
        self.package = package
        self.device = "cpu"
        self.variant = "fp32"
        if options.device in ("auto", "cuda"):
            if CUDA in ort.get_available_providers():
                try:
                    variant = options.variant or ("fp16" if "fp16" in package.variants else "fp32")
                    self._open(package, variant, [CUDA, CPU], options)
                    if self.encoder.get_providers()[0] == CUDA:
                        self.device = "cuda"
                except Exception as e:  # a CUDA provider that fails to start: serve on the CPU
                    log.warning("CUDA provider failed to start (%s); serving on the CPU", str(e).splitlines()[0])
            else:
                (log.warning if options.device == "cuda" else log.info)(
                    "no CUDA provider in this onnxruntime build (providers: %s); serving on the CPU",
                    ", ".join(ort.get_available_providers()))
        if self.device == "cpu":
            variant = options.variant or ("int8" if options.int8 and "int8" in package.variants else "fp32")
            self._open(package, variant, [CPU], options)
        self.float_type = np.float16 if self.variant == "fp16" else np.float32
        d = package.dims
        self.n_layers, self.n_heads, self.d_head = d.n_decoder_layers, d.n_heads, d.d_head
        names = contract.graph_names(self.n_layers)
        self._enc_outputs = list(names[contract.ENCODER][1])
        self._dec_inputs, self._dec_outputs = names[contract.DECODER][0], list(names[contract.DECODER][1])

    def _open(self, package: ModelPackage, variant: str, providers: list[str], options: RuntimeOptions) -> None:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        if options.threads:
            opts.intra_op_num_threads = options.threads
        opts.inter_op_num_threads = 1
        if not options.spin:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        disabled = CPU_DISABLED_FUSIONS if providers == [CPU] else []
        self.encoder = ort.InferenceSession(str(package.graph_path(contract.ENCODER, variant)), opts,
                                            providers=providers, disabled_optimizers=disabled)
        self.decoder = ort.InferenceSession(str(package.graph_path(contract.DECODER, variant)), opts,
                                            providers=providers, disabled_optimizers=disabled)
        self.variant = variant

    @property
    def providers(self) -> list[str]:
        return self.decoder.get_providers()

    def encode(self, src_ids: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """src_ids (B, S) -> every decoder layer's cross-attention keys (B, H, Dh, S) and values (B, H, S, Dh)."""
        out = self.encoder.run(self._enc_outputs, {contract.SRC_IDS: src_ids})
        n = self.n_layers
        return out[:n], out[n:]

    def step(self, input_ids: np.ndarray, positions: np.ndarray, past_mask: np.ndarray, src_mask: np.ndarray,
             cross_k: Sequence[np.ndarray], cross_v: Sequence[np.ndarray], past_k: Sequence[np.ndarray],
             past_v: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray], np.ndarray]:
        """One decoder step (see export/contract.py): log-probabilities (B, V), the new keys (B, H, Dh, 1)
        and values (B, H, 1, Dh) per layer, the last layer's cross-attention (B, S). The caches are read
        in place (onnxruntime wraps C-contiguous numpy arrays without copying them)."""
        feed = dict(zip(self._dec_inputs, (input_ids, positions, past_mask, src_mask, *cross_k, *cross_v,
                                           *past_k, *past_v)))
        out = self.decoder.run(self._dec_outputs, feed)
        n = self.n_layers
        return out[0], out[1:n + 1], out[n + 1:2 * n + 1], out[-1]

    def cache(self, rows: int, length: int, keys: bool = False) -> np.ndarray:
        """A zeroed buffer of one layer: values (rows, H, length, Dh), keys transposed (rows, H, Dh, length)."""
        shape = contract.kv_shape(contract.PAST_K if keys else contract.PAST_V, rows, self.n_heads, self.d_head, length)
        return np.zeros(shape, dtype=self.float_type)
