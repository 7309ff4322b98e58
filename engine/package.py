"""The model package: a directory the server loads without torch or onnx.

    encoder.onnx  decoder.onnx  [encoder.int8.onnx decoder.int8.onnx]  [*.fp16.onnx]
    tokenizer.model  model.json

``model.json`` is self-describing: format version, dimensions, vocabulary size, special
ids, language tags and pairs, length limits, the graphs' input/output names, the sha256
of every file, where the model came from, and a checksum of model.json's own content. ``Manifest``
is its one typed form: the exporter builds one and ``write_manifest`` writes it
(``Manifest.to_json`` + the files' sha256 + the checksum); ``ModelPackage.load`` checks the
JSON (``validate_manifest``), the checksum, the files and the tokenizer against what the JSON
says (``tokenizer_problems``: a hand-edited language tag would serve French for German),
reads it back with ``Manifest.from_json`` and reports every problem at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from engine import contract
from engine.tokenizer import PIECES, SENTENCEPIECE, TOKENIZER_KINDS, PackageTokenizer, TokenizerError


class PackageError(ValueError):
    """A model package that cannot be served; the message lists every problem found."""

    def __init__(self, path: Path, problems: list[str], hint: str = "export the checkpoint again with nmt-export"
                 ) -> None:
        self.problems = problems
        super().__init__(f"model package {path} is not valid: " + "; ".join(problems) + (f" ({hint})" if hint else ""))


def manifest_checksum(content: dict[str, Any]) -> str:
    """The sha256 of model.json's content without its ``checksum`` key, in a canonical form
    (sorted keys, no spaces): any edit of a value changes it, re-indenting does not."""
    body = {k: v for k, v in content.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
                          ).hexdigest()


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


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What model.json says about a model, less the files' sha256 (``write_manifest`` adds those)."""

    dims: Dimensions
    special_ids: dict[str, int]  # pad, unk, bos (the decoder's first input), eos
    # language -> id of the tag that starts a source to be translated into it (<2xx>; an imported
    # OPUS-MT model's >>xx<<). A package with a single target language (an imported one-pair
    # model) may have none.
    language_tags: dict[str, int]
    pairs: tuple[str, ...]  # "en-de", ...
    max_source_tokens: int
    max_target_tokens: int
    # Graphs the package holds, in contract.graph_names order: encoder and decoder always,
    # the device-resident step and rows optionally (packages exported before them lack them).
    graphs: tuple[str, ...] = contract.REQUIRED_GRAPHS
    provenance: dict[str, Any] = field(default_factory=dict)  # where the model came from (free-form)
    tokenizer: str = SENTENCEPIECE  # the tokenizer's kind and files (engine/tokenizer.py)
    # Language codes of models that name both languages (NLLB): language -> the id that starts
    # a source in that language, and the id forced as the first output token of a target in it.
    source_codes: dict[str, int] = field(default_factory=dict)
    target_codes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """model.json's content without ``files``; each graph's input and output names come
        from engine/contract.py, so a manifest cannot disagree with the graphs' contract."""
        names = contract.graph_names(self.dims.n_decoder_layers)
        return {
            "format": contract.PACKAGE_FORMAT, "format_version": contract.PACKAGE_VERSION,
            "model": {f.name: getattr(self.dims, f.name) for f in fields(Dimensions)},
            "special_ids": dict(self.special_ids),
            "language_tags": dict(self.language_tags),
            "pairs": list(self.pairs),
            "max_source_tokens": self.max_source_tokens, "max_target_tokens": self.max_target_tokens,
            "graphs": {graph: {"inputs": list(inputs), "outputs": list(outputs)}
                       for graph, (inputs, outputs) in names.items() if graph in self.graphs},
            "provenance": dict(self.provenance),
            # Written only when not the default, so packages from before the key keep their checksum.
            **({"tokenizer": self.tokenizer} if self.tokenizer != SENTENCEPIECE else {}),
            **({"source_codes": dict(self.source_codes)} if self.source_codes else {}),
            **({"target_codes": dict(self.target_codes)} if self.target_codes else {}),
        }

    @staticmethod
    def from_json(m: dict[str, Any]) -> Manifest:
        """The manifest of model.json's content (``files`` is not read); ``m`` must have passed
        ``validate_manifest``."""
        return Manifest(dims=Dimensions(**m["model"]), special_ids=dict(m["special_ids"]),
                        language_tags=dict(m["language_tags"]), pairs=tuple(m["pairs"]),
                        max_source_tokens=int(m["max_source_tokens"]), max_target_tokens=int(m["max_target_tokens"]),
                        graphs=tuple(g for g in _GRAPHS if g in m["graphs"]),
                        provenance=dict(m.get("provenance", {})), tokenizer=m.get("tokenizer", SENTENCEPIECE),
                        source_codes=dict(m.get("source_codes", {})), target_codes=dict(m.get("target_codes", {})))


@dataclass(frozen=True, kw_only=True)
class ModelPackage(Manifest):
    """A loaded, checked package directory: its manifest plus what its files hold."""

    path: Path
    variants: tuple[str, ...]  # graph variants present: fp32 always, int8 / fp16 optional
    resident_variants: tuple[str, ...] = ()  # variants with the device-resident step and rows graphs
    shortlist_variants: tuple[str, ...] = ()  # variants with the shortlist step graph (and shortlist.npz)
    # model.json's checksum: it covers the sha256 of every file, so it names this exact package
    # (the server's sentence cache keys answers by it).
    checksum: str = ""

    @property
    def manifest(self) -> Manifest:
        """The manifest alone (to write it again, changed, with ``write_manifest``)."""
        return Manifest(**_manifest_values(self))

    def graph_path(self, graph: str, variant: str = "fp32") -> Path:
        if variant not in self.variants:
            raise ValueError(f"{self.path} has no {variant} variant; it has {', '.join(self.variants)}")
        return self.path / contract.graph_file(graph, variant)

    @property
    def tokenizer_path(self) -> Path:
        """The SentencePiece model of a package nmt-export wrote (an imported model's source side)."""
        return self.path / (contract.TOKENIZER if self.tokenizer == SENTENCEPIECE else contract.SOURCE_SPM)

    def load_tokenizer(self) -> PackageTokenizer:
        """Text <-> this model's ids (its files were checked when the package loaded)."""
        special = {*self.special_ids.values(), *self.language_tags.values(), *self.source_codes.values(),
                   *self.target_codes.values()}
        return PackageTokenizer.load(self.path, self.tokenizer, frozenset(special))

    def supports(self, source: str, target: str) -> bool:
        return f"{source}-{target}" in self.pairs

    def source_ids(self, pieces: list[int], target: str, source: str = "") -> list[int]:
        """What the encoder reads: the target language's tag (models with tags), the source
        language's code (models with codes), the source's pieces, eos."""
        tag, code = self.language_tags.get(target), self.source_codes.get(source)
        if self.source_codes and code is None:
            raise ValueError(f"this model needs the source language, one of {', '.join(sorted(self.source_codes))}")
        return [*(() if tag is None else (tag,)), *(() if code is None else (code,)), *pieces,
                self.special_ids["eos"]]

    def target_prefix(self, target: str) -> tuple[int, ...]:
        """Tokens forced at the start of a translation into ``target`` (a Job's ``prefix``)."""
        code = self.target_codes.get(target)
        return () if code is None else (code,)

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
        if m["checksum"] != manifest_checksum(m):
            problems.append(f"{contract.MANIFEST} was changed after it was written (its checksum does not match its "
                            f"content): restore it, or write it with engine.package.write_manifest")
        files: dict[str, str] = m["files"]
        root = path.resolve()
        for name, digest in sorted(files.items()):
            f = path / name
            if not _inside(root, name):
                # Nothing is read from outside the package (a hand-made model.json naming
                # ../../etc/hostname or /etc/hostname, or a file linked out of the directory).
                problems.append(f"files entry {name!r} lies outside the package directory; every file of a "
                                f"package is in it")
            elif not f.is_file():
                problems.append(f"{name} is listed in {contract.MANIFEST} but missing")
            elif verify_hashes and sha256(f) != digest:
                problems.append(f"{name} does not match its sha256 in {contract.MANIFEST} (corrupt or replaced)")
        variants = _variants(files, contract.REQUIRED_GRAPHS)
        if "fp32" not in variants:
            problems.append("the fp32 encoder.onnx and decoder.onnx are not both listed in files")
        kind = m.get("tokenizer", SENTENCEPIECE)
        for name in tokenizer_files(kind):
            if name not in files:
                problems.append(f"{name} is not listed in files")
        if problems:
            raise PackageError(path, problems)
        manifest = Manifest.from_json(m)
        problems = tokenizer_problems(manifest, path)
        if problems:
            raise PackageError(path, problems)
        shortlisted = _variants(files, contract.SHORTLIST_GRAPHS) if contract.SHORTLIST_FILE in files else ()
        return cls(**_manifest_values(manifest), path=path, variants=variants,
                   resident_variants=_variants(files, contract.RESIDENT_GRAPHS), shortlist_variants=shortlisted,
                   checksum=m["checksum"])


def tokenizer_files(kind: str) -> tuple[str, ...]:
    """The files a package's tokenizer needs (``target.spm`` is optional for ``pieces``)."""
    return (contract.TOKENIZER,) if kind == SENTENCEPIECE else (contract.SOURCE_SPM, contract.VOCAB)


def tokenizer_problems(manifest: Manifest, path: Path) -> list[str]:
    """Where model.json and the tokenizer in ``path`` disagree: the vocabulary's size, the
    special ids, and each language tag, which must be the piece <2xx> of its language (a
    SentencePiece tokenizer of ours) or >>xx<< (an imported OPUS-MT model's, in any case)."""
    try:
        tok = PackageTokenizer.load(path, manifest.tokenizer)
    except TokenizerError as e:
        return [str(e)]
    size = tok.get_piece_size()
    name = contract.TOKENIZER if manifest.tokenizer == SENTENCEPIECE else contract.VOCAB
    if size != manifest.dims.vocab_size:
        return [f"{name} has {size} pieces, model.json says {manifest.dims.vocab_size}"]
    if manifest.tokenizer == PIECES:  # its special ids are ids of the model's vocabulary: checked with model.json
        return [f"language_tags.{language} is {given}, the piece {tok.id_to_piece(given)!r}, not >>{language}<<"
                for language, given in manifest.language_tags.items()
                if tok.id_to_piece(given).lower() != f">>{language}<<"]
    problems = []
    sp = tok.source
    ids = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    for name, given in manifest.special_ids.items():
        if given != ids[name]:
            problems.append(f"special_ids.{name} is {given}, but the tokenizer's {name} is {ids[name]}")
    for language, given in manifest.language_tags.items():
        piece = sp.id_to_piece(given)
        if piece != f"<2{language}>":
            problems.append(f"language_tags.{language} is {given}, the piece {piece!r}, not <2{language}>"
                            + (f" (id {sp.piece_to_id(f'<2{language}>')})"
                               if sp.piece_to_id(f"<2{language}>") != sp.unk_id() else ""))
    return problems


def _manifest_values(manifest: Manifest) -> dict[str, Any]:
    """A manifest's fields by name (a ModelPackage's too: it is a Manifest)."""
    return {f.name: getattr(manifest, f.name) for f in fields(Manifest)}


def _variants(files: dict[str, str], graphs: tuple[str, ...]) -> tuple[str, ...]:
    """The variants for which every one of ``graphs`` is in the package."""
    return tuple(v for v in contract.VARIANTS if all(contract.graph_file(g, v) in files for g in graphs))


def _inside(root: Path, name: str) -> bool:
    """Whether ``name`` (a ``files`` entry) is a relative path that stays in the resolved package
    directory ``root`` once ``..`` and links are followed."""
    if not name or Path(name).is_absolute():
        return False
    return (root / name).resolve().is_relative_to(root)


def _holds_checkpoint(path: Path) -> bool:
    """A shipped model (model.pt), a training run (checkpoints/, average.pt) or any *.pt file."""
    return (path / "checkpoints").is_dir() or any(path.glob("*.pt"))


def _not_a_package(path: Path) -> str:
    return f"this is a checkpoint, not a model package: export it with nmt-export {path} OUT, then pass OUT"


_REQUIRED = ("format", "format_version", "model", "special_ids", "language_tags", "pairs", "max_source_tokens",
             "max_target_tokens", "graphs", "files", "checksum")
_OPTIONAL = ("provenance", "tokenizer", "source_codes", "target_codes")
# Every graph a package may hold, in order.
_GRAPHS = (*contract.REQUIRED_GRAPHS, *contract.RESIDENT_GRAPHS, *contract.SHORTLIST_GRAPHS)


def validate_manifest(m: Any) -> list[str]:
    """Every problem with a manifest's content (not its files' bytes), as readable sentences."""
    if not isinstance(m, dict):
        return [f"{contract.MANIFEST} must hold a JSON object"]
    problems = [f"{contract.MANIFEST} has no {key!r}" for key in _REQUIRED if key not in m]
    # Unknown keys fail loudly: a key this code does not read is a typo or a newer format.
    unknown = sorted(set(m) - {*_REQUIRED, *_OPTIONAL})
    if unknown:
        problems.append(f"{contract.MANIFEST} has unknown keys {', '.join(map(repr, unknown))}; "
                        f"it may hold only {', '.join(sorted({*_REQUIRED, *_OPTIONAL}))}")
    if problems:
        return problems
    for key, kind in (("special_ids", dict), ("language_tags", dict), ("pairs", list), ("graphs", dict),
                      ("files", dict), ("provenance", dict), ("source_codes", dict), ("target_codes", dict)):
        if key in m and not isinstance(m[key], kind):
            problems.append(f"{key} must be a JSON {'object' if kind is dict else 'array'}")
    if problems:
        return problems  # the checks below read them
    if not all(isinstance(pair, str) for pair in m["pairs"]):
        problems.append("pairs must be strings like 'en-de'")
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
        for kind, ids in (("special_ids", m["special_ids"]), ("language_tags", m["language_tags"]),
                          ("source_codes", m.get("source_codes", {})), ("target_codes", m.get("target_codes", {}))):
            for key, value in (ids.items() if isinstance(ids, dict) else ()):
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab:
                    problems.append(f"{kind}.{key} is {value!r}, not an id of the {vocab}-piece vocabulary")
    elif isinstance(dims, dict) and "vocab_size" in dims:
        problems.append(f"model.vocab_size is {vocab!r}, not a positive integer")
    positions = dims.get("max_positions") if isinstance(dims, dict) else None
    for key in ("max_source_tokens", "max_target_tokens"):
        value = m[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 2:
            problems.append(f"{key} is {value!r}, not an integer of at least 2")
        elif isinstance(positions, int) and value > positions:
            # Longer inputs would pass the server's checks and then fail inside the graphs (INTERNAL).
            problems.append(f"{key} is {value}, more than the model's {positions} positions")
    if m.get("tokenizer", SENTENCEPIECE) not in TOKENIZER_KINDS:
        problems.append(f"tokenizer is {m['tokenizer']!r}, not one of {', '.join(TOKENIZER_KINDS)}")
    targets = {str(pair).partition("-")[2] for pair in m["pairs"]}
    codes = m.get("source_codes", {}), m.get("target_codes", {})
    for pair in m["pairs"]:
        src, _, tgt = str(pair).partition("-")
        if codes[0] or codes[1]:  # a model with language codes: both languages must have theirs
            for name, lang, table in (("source_codes", src, codes[0]), ("target_codes", tgt, codes[1])):
                if lang not in table:
                    problems.append(f"pair {pair} needs {lang!r} in {name}")
        elif tgt not in m["language_tags"] and (m["language_tags"] or len(targets) > 1):
            # Untagged sources are fine only where there is one target language to translate into.
            problems.append(f"pair {pair} needs a tag for {tgt!r} in language_tags")
    unknown_graphs = sorted(set(m["graphs"]) - set(_GRAPHS))
    if unknown_graphs:
        problems.append(f"graphs has unknown entries {', '.join(map(repr, unknown_graphs))}; "
                        f"it may hold only {', '.join(_GRAPHS)}")
    # A graph file the manifest does not describe could not be checked against the contract.
    for graph in _GRAPHS:
        listed = [name for name in (contract.graph_file(graph, v) for v in contract.VARIANTS) if name in m["files"]]
        if listed and graph not in m["graphs"]:
            problems.append(f"files lists {', '.join(listed)} but graphs has no {graph!r} entry")
    layers = dims.get("n_decoder_layers") if isinstance(dims, dict) else None
    if not isinstance(layers, int) or layers < 1:
        if isinstance(dims, dict) and "n_decoder_layers" in dims:
            problems.append(f"model.n_decoder_layers is {layers!r}, not a positive integer")
        return problems  # the graphs' names depend on it
    for graph, (inputs, outputs) in contract.graph_names(layers).items():
        g = m["graphs"].get(graph)
        if g is None and graph not in contract.REQUIRED_GRAPHS:
            continue  # an optional graph the exporter did not write
        if not isinstance(g, dict):
            problems.append(f"graphs has no {graph!r} entry")
            continue
        if tuple(g.get("inputs", ())) != inputs:
            problems.append(f"{graph} inputs are {g.get('inputs')}, this server expects {list(inputs)}")
        if tuple(g.get("outputs", ())) != outputs:
            problems.append(f"{graph} outputs are {g.get('outputs')}, this server expects {list(outputs)}")
    return problems


def write_manifest(path: Path, manifest: Manifest) -> None:
    """Write ``manifest`` as path/model.json with the sha256 of every other file in ``path``;
    PackageError (nothing written) when the result would not load."""
    files = sorted(p.name for p in path.iterdir() if p.is_file() and p.name != contract.MANIFEST)
    content = {**manifest.to_json(), "files": {name: sha256(path / name) for name in files}}
    content["checksum"] = manifest_checksum(content)
    problems = validate_manifest(content)
    if problems:
        raise PackageError(path, problems)
    (path / contract.MANIFEST).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n")
