"""onnxruntime sessions of one model package: device choice, variant choice, threads.

``auto`` and ``cuda`` try the CUDA provider and fall back to the CPU with one warning
line; ``cpu`` forces the CPU. On the CPU the int8 variant can be chosen; on CUDA the
fp16 variant is used when the package has one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from export import contract
from export.package import ModelPackage

log = logging.getLogger("nmt.server")

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"


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

    def _open(self, package: ModelPackage, variant: str, providers: list[str], options: RuntimeOptions) -> None:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        if options.threads:
            opts.intra_op_num_threads = options.threads
        opts.inter_op_num_threads = 1
        if not options.spin:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.encoder = ort.InferenceSession(str(package.graph_path(contract.ENCODER, variant)), opts,
                                            providers=providers)
        self.decoder = ort.InferenceSession(str(package.graph_path(contract.DECODER, variant)), opts,
                                            providers=providers)
        self.variant = variant

    @property
    def providers(self) -> list[str]:
        return self.decoder.get_providers()

    def encode(self, src_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross_k, cross_v = self.encoder.run(None, {contract.SRC_IDS: src_ids})
        return cross_k, cross_v

    def step(self, input_ids: np.ndarray, positions: np.ndarray, past_mask: np.ndarray, src_mask: np.ndarray,
             cross_k: np.ndarray, cross_v: np.ndarray, past_k: np.ndarray, past_v: np.ndarray,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        logits, present_k, present_v, attention = self.decoder.run(None, {
            contract.INPUT_IDS: input_ids, contract.POSITIONS: positions, contract.PAST_MASK: past_mask,
            contract.SRC_MASK: src_mask, contract.CROSS_K: cross_k, contract.CROSS_V: cross_v,
            contract.PAST_K: past_k, contract.PAST_V: past_v})
        return logits, present_k, present_v, attention

    def empty_cache(self, rows: int, past: int = 0) -> np.ndarray:
        return np.zeros((self.n_layers, rows, self.n_heads, past, self.d_head), dtype=self.float_type)
