"""The model package: a directory the server loads without torch or onnx.

    encoder.onnx  decoder.onnx  [encoder.int8.onnx decoder.int8.onnx]  [*.fp16.onnx]
    tokenizer.model  model.json

``model.json`` is self-describing: format version, dimensions, vocabulary size, special
ids, language tags and pairs, length limits, the graphs' input/output names, the sha256
of every file and where the model came from. ``ModelPackage.load`` checks all of it and
reports every problem at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from export import contract


class PackageError(ValueError):
    """A model package that cannot be served; the message lists every problem found."""

    def __init__(self, path: Path, problems: list[str], hint: str = "export the checkpoint again with nmt-export"
                 ) -> None:
        self.problems = problems
        super().__init__(f"model package {path} is not valid: " + "; ".join(problems) + (f" ({hint})" if hint else ""))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Dimensions:
    d_model: int
    n_heads: int
    d_head: int
    n_encoder_layers: int
    n_decoder_layers: int
    vocab_size: int
    max_positions: int


@dataclass(frozen=True)
class ModelPackage:
    path: Path
    dims: Dimensions
    special_ids: dict[str, int]
    language_tags: dict[str, int]  # language -> id of its <2xx> tag
    pairs: tuple[str, ...]  # "en-de", ...
    max_source_tokens: int
    max_target_tokens: int
    variants: tuple[str, ...]  # graph variants present: fp32 always, int8 / fp16 optional
    provenance: dict[str, Any] = field(default_factory=dict)

    def graph_path(self, graph: str, variant: str = "fp32") -> Path:
        if variant not in self.variants:
            raise ValueError(f"{self.path} has no {variant} variant; it has {', '.join(self.variants)}")
        return self.path / contract.graph_file(graph, variant)

    @property
    def tokenizer_path(self) -> Path:
        return self.path / contract.TOKENIZER

    def supports(self, source: str, target: str) -> bool:
        return f"{source}-{target}" in self.pairs

    @classmethod
    def load(cls, path: str | Path, verify_hashes: bool = True) -> ModelPackage:
        """Read and validate a package; raises PackageError naming every mismatch."""
        path = Path(path)
        manifest_path = path / contract.MANIFEST
        if path.is_file() and path.suffix == ".pt":
            raise PackageError(path, [_not_a_package(path)], "")
        if path.is_file():
            raise PackageError(path, ["this is a file, not a model package directory"],
                               "give the directory nmt-export wrote")
        if not path.is_dir():
            raise PackageError(path, ["the directory does not exist"], "give the directory nmt-export wrote")
        if not manifest_path.is_file():
            if _holds_checkpoint(path):
                raise PackageError(path, [_not_a_package(path)], "")
            raise PackageError(path, [f"{contract.MANIFEST} is missing"], "give the directory nmt-export wrote")
        try:
            m = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PackageError(path, [f"{contract.MANIFEST} is not valid JSON: {e}"]) from None
        problems = validate_manifest(m)
        if problems:
            raise PackageError(path, problems)
        files: dict[str, str] = m["files"]
        for name, digest in sorted(files.items()):
            f = path / name
            if not f.is_file():
                problems.append(f"{name} is listed in {contract.MANIFEST} but missing")
            elif verify_hashes and sha256(f) != digest:
                problems.append(f"{name} does not match its sha256 in {contract.MANIFEST} (corrupt or replaced)")
        variants = tuple(v for v in contract.VARIANTS
                         if all(contract.graph_file(g, v) in files for g in (contract.ENCODER, contract.DECODER)))
        if "fp32" not in variants:
            problems.append("the fp32 encoder.onnx and decoder.onnx are not both listed in files")
        if contract.TOKENIZER not in files:
            problems.append(f"{contract.TOKENIZER} is not listed in files")
        if problems:
            raise PackageError(path, problems)
        return cls(path=path, dims=Dimensions(**m["model"]), special_ids=dict(m["special_ids"]),
                   language_tags=dict(m["language_tags"]), pairs=tuple(m["pairs"]),
                   max_source_tokens=int(m["max_source_tokens"]), max_target_tokens=int(m["max_target_tokens"]),
                   variants=variants, provenance=m.get("provenance", {}))


def _holds_checkpoint(path: Path) -> bool:
    """A shipped model (model.pt), a training run (checkpoints/, average.pt) or any *.pt file."""
    return (path / "checkpoints").is_dir() or any(path.glob("*.pt"))


def _not_a_package(path: Path) -> str:
    return f"this is a checkpoint, not a model package: export it with nmt-export {path} OUT, then pass OUT"


_REQUIRED = ("format", "format_version", "model", "special_ids", "language_tags", "pairs", "max_source_tokens",
             "max_target_tokens", "graphs", "files")


def validate_manifest(m: Any) -> list[str]:
    """Every problem with a manifest's content (not its files), as readable sentences."""
    if not isinstance(m, dict):
        return [f"{contract.MANIFEST} must hold a JSON object"]
    problems = [f"{contract.MANIFEST} has no {key!r}" for key in _REQUIRED if key not in m]
    if problems:
        return problems
    if m["format"] != contract.PACKAGE_FORMAT:
        problems.append(f"format is {m['format']!r}, expected {contract.PACKAGE_FORMAT!r}")
    if m["format_version"] != contract.PACKAGE_VERSION:
        problems.append(f"format_version is {m['format_version']}, this code reads {contract.PACKAGE_VERSION}")
    dims = m["model"]
    expected_dims = set(Dimensions.__dataclass_fields__)
    if not isinstance(dims, dict) or set(dims) != expected_dims:
        problems.append(f"model must have exactly the keys {', '.join(sorted(expected_dims))}")
    elif dims["d_model"] != dims["n_heads"] * dims["d_head"]:
        problems.append(f"d_model {dims['d_model']} != n_heads {dims['n_heads']} x d_head {dims['d_head']}")
    if set(m["special_ids"]) != {"pad", "unk", "bos", "eos"}:
        problems.append("special_ids must name pad, unk, bos and eos")
    vocab = dims.get("vocab_size") if isinstance(dims, dict) else None
    if isinstance(vocab, int) and vocab > 0:
        # An id outside the vocabulary fails inside the graphs, on every request that uses it.
        for kind, ids in (("special_ids", m["special_ids"]), ("language_tags", m["language_tags"])):
            for key, value in (ids.items() if isinstance(ids, dict) else ()):
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab:
                    problems.append(f"{kind}.{key} is {value!r}, not an id of the {vocab}-piece vocabulary")
    elif isinstance(dims, dict) and "vocab_size" in dims:
        problems.append(f"model.vocab_size is {vocab!r}, not a positive integer")
    for key in ("max_source_tokens", "max_target_tokens"):
        value = m[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 2:
            problems.append(f"{key} is {value!r}, not an integer of at least 2")
    for pair in m["pairs"]:
        tgt = str(pair).partition("-")[2]
        if tgt not in m["language_tags"]:
            problems.append(f"pair {pair} needs a tag for {tgt!r} in language_tags")
    layers = dims.get("n_decoder_layers") if isinstance(dims, dict) else None
    if not isinstance(layers, int) or layers < 1:
        if isinstance(dims, dict) and "n_decoder_layers" in dims:
            problems.append(f"model.n_decoder_layers is {layers!r}, not a positive integer")
        return problems  # the graphs' names depend on it
    for graph, (inputs, outputs) in contract.graph_names(layers).items():
        g = m["graphs"].get(graph) if isinstance(m["graphs"], dict) else None
        if not isinstance(g, dict):
            problems.append(f"graphs has no {graph!r} entry")
            continue
        if tuple(g.get("inputs", ())) != inputs:
            problems.append(f"{graph} inputs are {g.get('inputs')}, this server expects {list(inputs)}")
        if tuple(g.get("outputs", ())) != outputs:
            problems.append(f"{graph} outputs are {g.get('outputs')}, this server expects {list(outputs)}")
    return problems


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Fill in the sha256 of every package file and write model.json."""
    files = sorted(p.name for p in path.iterdir() if p.is_file() and p.name != contract.MANIFEST)
    manifest = {**manifest, "files": {name: sha256(path / name) for name in files}}
    problems = validate_manifest(manifest)
    if problems:
        raise PackageError(path, problems)
    (path / contract.MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
