"""Every decoding default, defined once: special ids, length penalty, output-length rule.

Training, export, the engine, the server, the benchmarks and the tests import these; none
writes its own copy. Pure Python (no numpy, no onnxruntime), so the PyTorch reference and
the CTranslate2 benchmark import it too.
"""

from __future__ import annotations

# Special ids, fixed for every tokenizer this project trains (training/tokenizer.py) and
# written into every model package's manifest (engine/package.py).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_IDS: dict[str, int] = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}

# GNMT's length penalty ((5 + |Y|) / 6) ^ alpha, for beam search: the default alpha.
LENGTH_PENALTY = 0.6

# The beam a person gets without choosing one, wherever they send the text: the web page,
# LibreTranslate's /translate, /v1/translate, nmt-translate and the Python client, so that the
# same text gets the same translation everywhere (and asking for alternatives, up to
# BEAM_SIZE - 1 of them, does not change it). A raw gRPC request's 0 stays greedy.
BEAM_SIZE = 4

# The default output-length bound, OUTPUT_SLOPE x source tokens (tag and eos included) +
# OUTPUT_MARGIN. It must leave room for the longest natural translations: over the training
# split of the bundled corpus (all six directions en<->de/fr/es, 384,076 pairs, the shipped
# tokenizer; `python -m bench.studies.length_ratio`), target/source pieces is 1.04 at the median, 1.71
# at the 99th and 2.61 at the 99.9th percentile (per direction 2.05 de-en to 2.82 en-es).
# 3 x + 10 is above every direction's 99.9th percentile and cuts 0.024 % of those pairs
# (corrupt ones, a "..." source against a whole verse); the 1.5 x + 10 it replaces cut 0.21 %.
OUTPUT_SLOPE = 3.0
OUTPUT_MARGIN = 10


def default_max_len(src_len: int, cap: int) -> int:
    """The output-length bound of one source of ``src_len`` tokens, at most ``cap``: per
    sentence, so the batch never changes it."""
    return min(cap, int(OUTPUT_SLOPE * src_len) + OUTPUT_MARGIN)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's ((5 + |Y|) / 6) ^ alpha."""
    return ((5.0 + length) / 6.0) ** alpha

# Where the engine runs (engine/runtime.py): auto = CUDA when it works, else the CPU.
DEVICES = ("auto", "cuda", "cpu")
# Device-resident decoding (engine/decoding.py, ResidentBatch): auto = on CUDA only.
RESIDENT_MODES = ("auto", "on", "off")
# Which int8 graphs the CPU serves (engine/cpu.py): auto (by the CPU), or one width forced. ``int8``
# gives the same answers on every x86 CPU, so a fleet of mixed CPUs answers a text alike.
INT8_GRAPHS = ("auto", "int8", "int8w8")
# When onnxruntime's intra-op threads spin waiting for work: "always" (onnxruntime's own
# default: between runs too), "run" (between the operators of a run, stopping when it returns:
# session.force_spinning_stop) or "never". Offline decoding (one process decoding batches:
# nmt-bench's engines, nmt-bulk's actors, the studies) spins within runs: only the loop's numpy
# runs between two runs, and workers spinning then take its core. With 2 threads on a 2-core
# machine, fp32 greedy batch 1 ran at 18.9 sentences/s spinning always, 32.0 never, 39.9
# within runs (1 thread: 25.7); int8 greedy batch 16 at 107.0 / 130.5 / 187.4 (156.8). A
# server never spins: gRPC's threads and the event loop need the cores during runs as well
# (nmt-bench's server engine, 2 threads, 8 clients, fp32: greedy batch 32 at 110.4 never
# spinning, 71.6-87.7 within runs). docs/BENCHMARKS.md has both.
SPIN_MODES = ("always", "run", "never")
SPIN = "run"  # offline decoding (engine/runtime.py RuntimeOptions)
SERVER_SPIN = "never"  # nmt-serve without --spin-threads
SPIN_ASKED = "always"  # --spin-threads (nmt-serve, nmt-bench)
