"""onnxruntime sessions of one model package: device choice, variant choice, threads.

The device never lies. ``cpu`` runs on the CPU. ``cuda`` and ``auto`` load the CUDA and
cuDNN libraries of the pip packages first (``onnxruntime.preload_dlls``: without it the CUDA
provider of a pip-installed onnxruntime-gpu cannot find them and every session quietly comes
up on the CPU), open the sessions, then check which provider each one actually got. If CUDA
did not attach, ``cuda`` refuses to start (``DeviceError``, the reason in one line: the user
asked for the GPU) and ``auto`` serves on the CPU after one warning line with the reason.
``Runtime.device`` is then what the sessions run on, and the server reports it.

On the CPU the int8 variant can be chosen; on CUDA the fp16 variant is used when the package
has one. On CUDA, decoding is device-resident (ResidentBatch in engine/decoding.py) when the package has the
step and rows graphs; ``resident`` forces it on or off (the tests run it on the CPU).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from engine import contract
from engine.cpu import int8_variant
from engine.defaults import DEVICES, RESIDENT_MODES, SPIN, SPIN_MODES
from engine.memory import keep_freed_memory
from engine.package import ModelPackage
from engine.shortlist import Shortlist

log = logging.getLogger("nmt.engine")

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"

# Graph fusions that make the CPU slower. onnxruntime's CPU SkipLayerNormalization kernel
# (residual add + LayerNorm fused) runs ~4.5 ns per element where the plain Add and
# LayerNormalization kernels it replaces take a fraction of that: without the fusion the
# encoder of a 32 x 30 batch took 36 ms instead of 42 (fp32; int8 14 instead of 17), a
# decoder step 7 % less (one-off A/B; docs/BENCHMARKS.md). MatMulScaleFusion folds the
# query's 1/sqrt(d_k) into the score product (FusedMatMul alpha), which takes the CPU
# MatMul off its matrix-vector path for one query row: 68 vs 43 us per layer at 32 rows
# and 32 cached positions (docs/BENCHMARKS.md, what we tried). CUDA keeps both.
CPU_DISABLED_FUSIONS = ["SkipLayerNormFusion", "MatMulScaleFusion"]


@dataclass(frozen=True)
class RuntimeOptions:
    device: str = "auto"  # auto | cuda | cpu
    threads: int = 0  # CPU intra-op threads; 0 = onnxruntime's default
    int8: bool = False  # on the CPU, use the int8 graphs when the package has them (int8w8 where exact)
    variant: str = ""  # force one graph variant (fp32, int8, int8w8, fp16) instead of choosing by device
    int8_graphs: str = "auto"  # with int8 on the CPU: auto (by the CPU), int8 or int8w8 (engine/cpu.py)
    spin: str = SPIN  # when intra-op threads spin for work: always | run | never (engine/defaults.py)
    resident: str = "auto"  # auto (on CUDA when the package has the graphs) | on | off: engine/decoding.ResidentBatch
    # Score only the batch's vocabulary shortlist (engine/shortlist.py) when the package has one
    # for the variant in use (host-memory decoding; the resident path scores the whole vocabulary).
    shortlist: bool = True




class DeviceError(RuntimeError):
    """The GPU was asked for explicitly and cannot be used; the message says why."""


def preload_cuda() -> str:
    """Load the CUDA and cuDNN libraries that pip's nvidia-* packages installed, so that the
    CUDA provider finds them; '' or why it could not (a build without preload_dlls)."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return f"onnxruntime {ort.__version__} has no preload_dlls (1.21 or later has)"
    try:
        preload(cuda=True, cudnn=True, msvc=False)
    except Exception as e:  # a partial set of libraries: the session check below says what happened
        return f"preload_dlls failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    return ""


class Runtime:
    """The encoder and decoder-step sessions, and numpy in/out in the contract's names."""

    def __init__(self, package: ModelPackage, options: RuntimeOptions) -> None:
        if options.device not in DEVICES:
            raise ValueError(f"device {options.device!r} must be auto, cuda or cpu")
        if options.resident not in RESIDENT_MODES:
            raise ValueError(f"resident {options.resident!r} must be auto, on or off")
        if options.spin not in SPIN_MODES:
            raise ValueError(f"spin {options.spin!r} must be one of {', '.join(SPIN_MODES)}")
        keep_freed_memory()  # decoding reallocates large arrays all the time: engine/memory.py
        self.package = package
        self.device = "cpu"
        self.variant = "fp32"
        self.fallback_reason = ""  # why CUDA was asked for (auto) and the CPU is used
        if options.device in ("auto", "cuda"):
            why = self._open_cuda(package, options)
            if why:
                if options.device == "cuda":
                    raise DeviceError(f"--device cuda: {why}")
                self.fallback_reason = why
                # A CPU-only build (the onnxruntime package) on auto is the expected CPU install:
                # said once at INFO. A CUDA build whose provider did not attach is a GPU host
                # serving on the CPU by accident: a warning.
                cpu_build = CUDA not in ort.get_available_providers()
                (log.info if cpu_build else log.warning)("CUDA not used, serving on the CPU: %s", why)
        if self.device == "cpu":
            # --int8: the weight width this CPU runs exactly (engine/cpu.py)
            variant = (options.variant or (options.int8 and int8_variant(package.variants, choice=options.int8_graphs))
                       or "fp32")
            self._open(package, variant, [CPU], options)
        self.float_type = np.float16 if self.variant == "fp16" else np.float32
        d = package.dims
        self.n_layers, self.n_heads, self.d_head = d.n_decoder_layers, d.n_heads, d.d_head
        names = contract.graph_names(self.n_layers)
        self._enc_outputs = list(names[contract.ENCODER][1])
        self._dec_inputs, self._dec_outputs = names[contract.DECODER][0], list(names[contract.DECODER][1])
        self.resident = self._open_resident(package, options)
        self.shortlist = self._open_shortlist(package, options)

    def _open_shortlist(self, package: ModelPackage, options: RuntimeOptions) -> Shortlist | None:
        """The shortlist step graph and what it may score, when the package has them and they are used."""
        if not options.shortlist or self.resident or self.variant not in package.shortlist_variants:
            return None
        providers = [CUDA, CPU] if self.device == "cuda" else [CPU]
        self.shortlist_table = self._session(package.graph_path(contract.SHORTLIST_TABLE, self.variant), providers,
                                             options)
        self.shortlist_session = self._session(package.graph_path(contract.SHORTLIST, self.variant), providers,
                                               options)
        self._shortlist_inputs = contract.shortlist_inputs(self.n_layers)
        self._table_of: tuple[np.ndarray | None, list[np.ndarray]] = (None, [])  # the ids it was gathered for
        self._tag_language = {tag: lang for lang, tag in package.language_tags.items()}
        return Shortlist.load(package.path / contract.SHORTLIST_FILE)

    def allowed(self, src: Sequence[int]) -> np.ndarray | None:
        """The sorted target ids a source (tag + pieces + eos) may be translated into, by the
        shortlist; None without one (or for a source that starts with no language tag)."""
        if self.shortlist is None or not src or src[0] not in self._tag_language:
            return None
        return self.shortlist.ids([src], self._tag_language[src[0]])

    def _open_cuda(self, package: ModelPackage, options: RuntimeOptions) -> str:
        """Open the sessions on CUDA; '' when both run there, else why not (sessions closed)."""
        if CUDA not in ort.get_available_providers():
            return (f"this onnxruntime build has no CUDA provider (it has {', '.join(ort.get_available_providers())}"
                    "; install onnxruntime-gpu instead of onnxruntime)")
        preload_problem = preload_cuda()
        variant = options.variant or ("fp16" if "fp16" in package.variants else "fp32")
        try:
            self._open(package, variant, [CUDA, CPU], options)
        except Exception as e:  # a CUDA provider that fails to start
            return f"the CUDA provider failed to start: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        attached = [s.get_providers()[0] for s in (self.encoder, self.decoder)]
        if attached != [CUDA, CUDA]:
            del self.encoder, self.decoder
            reason = "the CUDA provider did not attach (CUDA 12/13 or cuDNN 9 libraries not found"
            return reason + (f"; {preload_problem})" if preload_problem else ")")
        self.device = "cuda"
        return ""

    def _open_resident(self, package: ModelPackage, options: RuntimeOptions) -> bool:
        """Open the device-resident step and rows graphs when they are used."""
        wanted = options.resident == "on" or (options.resident == "auto" and self.device == "cuda")
        if not wanted:
            return False
        if self.variant not in package.resident_variants:
            if options.resident == "on":
                raise ValueError(f"{package.path} has no {self.variant} step and rows graphs for resident decoding "
                                 "(export it again with nmt-export)")
            log.warning("%s has no %s step and rows graphs: decoding copies the cache between host and %s at "
                        "every step (export it again with nmt-export)", package.path, self.variant, self.device)
            return False
        providers = [CUDA, CPU] if self.device == "cuda" else [CPU]
        self.step_session = self._session(package.graph_path(contract.STEP, self.variant), providers, options)
        self.rows_session = self._session(package.graph_path(contract.ROWS, self.variant), providers, options)
        names = contract.graph_names(self.n_layers)
        self.step_outputs = list(names[contract.STEP][1])
        self.rows_outputs = list(names[contract.ROWS][1])
        return True

    def _session(self, path, providers: list[str], options: RuntimeOptions) -> ort.InferenceSession:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        if options.threads:
            opts.intra_op_num_threads = options.threads
        opts.inter_op_num_threads = 1
        if options.spin == "run":  # spin between a run's operators, stop when it returns
            opts.add_session_config_entry("session.force_spinning_stop", "1")
        elif options.spin == "never":
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        disabled = CPU_DISABLED_FUSIONS if providers == [CPU] else []
        return ort.InferenceSession(str(path), opts, providers=providers, disabled_optimizers=disabled)

    def _open(self, package: ModelPackage, variant: str, providers: list[str], options: RuntimeOptions) -> None:
        self.encoder = self._session(package.graph_path(contract.ENCODER, variant), providers, options)
        self.decoder = self._session(package.graph_path(contract.DECODER, variant), providers, options)
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
             past_v: Sequence[np.ndarray], vocab: tuple[np.ndarray, np.ndarray] | None = None
             ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray], np.ndarray]:
        """One decoder step (see engine/contract.py): log-probabilities (B, V), the new keys (B, H, Dh, 1)
        and values (B, H, 1, Dh) per layer, the last layer's cross-attention (B, S). The caches are read
        in place (onnxruntime wraps C-contiguous numpy arrays without copying them). ``cross_k`` and
        ``cross_v`` may hold fewer sources than rows, each read by a group of consecutive rows. With ``vocab``
        (ids (V',), mask (B, V')) the shortlist graph scores only those ids: log-probabilities (B, V')."""
        values = (input_ids, positions, past_mask, src_mask, *cross_k, *cross_v, *past_k, *past_v)
        if vocab is None:
            out = self.decoder.run(self._dec_outputs, dict(zip(self._dec_inputs, values)))
        else:
            ids, mask = vocab
            if self._table_of[0] is not ids:  # a new set of pieces (Batch makes a new array for each)
                self._table_of = (ids, self.shortlist_table.run(list(contract.SHORTLIST_TABLE_OUTPUTS),
                                                                {contract.VOCAB_IDS: ids}))
            feed = dict(zip(self._shortlist_inputs, (*values, *self._table_of[1], mask)))
            out = self.shortlist_session.run(self._dec_outputs, feed)
        n = self.n_layers
        return out[0], out[1:n + 1], out[n + 1:2 * n + 1], out[-1]

    def cache(self, rows: int, length: int, keys: bool = False) -> np.ndarray:
        """A zeroed buffer of one layer: values (rows, H, length, Dh), keys transposed (rows, H, Dh, length)."""
        shape = contract.kv_shape(contract.PAST_K if keys else contract.PAST_V, rows, self.n_heads, self.d_head, length)
        return np.zeros(shape, dtype=self.float_type)

    # Device-resident decoding (engine/decoding.py, ResidentBatch): onnxruntime values on the
    # sessions' device, bound to the graphs' inputs and outputs, so nothing is copied between
    # host and device that the caller did not ask for.
    def value(self, array: np.ndarray) -> ort.OrtValue:
        """``array`` copied to the sessions' device."""
        return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), self.device, 0)

    def empty_values(self, name: str, rows: int = 0, length: int = 0) -> list[ort.OrtValue]:
        """Zeroed per-layer device buffers of the shape ``name`` has (cross_k, cache_v, ...)."""
        shape = contract.kv_shape(name, rows, self.n_heads, self.d_head, length)
        return [self.value(np.zeros(shape, dtype=self.float_type)) for _ in range(self.n_layers)]

    def encode_values(self, src_ids: np.ndarray) -> tuple[list[ort.OrtValue], list[ort.OrtValue]]:
        """``encode``, its outputs left on the device."""
        out = self._run_bound(self.encoder, {contract.SRC_IDS: src_ids}, {}, self._enc_outputs, ())
        n = self.n_layers
        return out[:n], out[n:]

    def run_step(self, host: dict[str, np.ndarray], values: dict[str, ort.OrtValue],
                 to_host: Sequence[str]) -> list[ort.OrtValue]:
        """One run of the resident step graph; the outputs named in ``to_host`` come back to
        host memory, the others stay on the device (contract.step_outputs order)."""
        return self._run_bound(self.step_session, host, values, self.step_outputs, to_host)

    def run_rows(self, host: dict[str, np.ndarray], values: dict[str, ort.OrtValue]) -> list[ort.OrtValue]:
        """One run of the rows graph; every output stays on the device."""
        return self._run_bound(self.rows_session, host, values, self.rows_outputs, ())

    def _run_bound(self, session: ort.InferenceSession, host: dict[str, np.ndarray],
                   values: dict[str, ort.OrtValue], outputs: Sequence[str],
                   to_host: Sequence[str]) -> list[ort.OrtValue]:
        binding = session.io_binding()
        for name, array in host.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(array))
        for name, v in values.items():
            binding.bind_ortvalue_input(name, v)
        for name in outputs:
            binding.bind_output(name, "cpu" if name in to_host else self.device, 0)
        session.run_with_iobinding(binding)
        return list(binding.get_outputs())
