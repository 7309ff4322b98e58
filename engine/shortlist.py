"""Vocabulary shortlists: the target pieces a batch's translations may need, learned from the
training data, so that a decoder step need not score the whole vocabulary.

Per target language, two lists are learned from tokenized training pairs:
- the ``frequent`` target pieces (by the number of sentences they occur in), always allowed;
- for each source piece, the ``per_source`` target pieces most often seen with it (the
  share of the sentences holding the source piece whose translation holds the target piece,
  p(t | s), counted over whole sentences: there is no word alignment), the frequent ones
  left out since they are in anyway.
A batch may use the union, over its sources, of those lists, plus the frequent pieces, the
special ids (eos, unk) and every source piece itself (names, numbers and placeholders are
copied). Marian and CTranslate2 cut the output layer the same way (Marian from a lexical
table, CTranslate2 from a vocabulary map); here the table is co-occurrence, so it needs no
aligner. Torch-free; export/shortlist_graph.py learns one and puts it in a package with its step
graph, bench/studies/shortlist_cost.py measures what it costs in BLEU.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.defaults import EOS_ID, UNK_ID

FREQUENT = 256  # target pieces always allowed, per target language
PER_SOURCE = 32  # target pieces allowed per source piece, besides the frequent ones
MIN_COOCCURRENCE = 2  # a (source, target) pair seen in fewer sentences than this is noise
ALWAYS = (EOS_ID, UNK_ID)
KEY_CHUNK = 1 << 24  # (source, target) keys counted at once: 128 MiB of int64


@dataclass(frozen=True)
class Shortlist:
    """Allowed target pieces per target language (see the module's docstring)."""

    vocab_size: int
    frequent: dict[str, np.ndarray]  # language -> sorted ids (int32)
    offsets: dict[str, np.ndarray]  # language -> (vocab_size + 1,) int64: source piece s's ids are
    targets: dict[str, np.ndarray]  # targets[lang][offsets[lang][s]:offsets[lang][s + 1]] (int32)

    @property
    def languages(self) -> list[str]:
        return sorted(self.frequent)

    def ids(self, sources: Iterable[Sequence[int]], lang: str) -> np.ndarray:
        """The sorted target ids a batch of ``sources`` (token ids, as the encoder reads them)
        translated into ``lang`` may produce."""
        if lang not in self.frequent:
            raise KeyError(f"the shortlist has no target language {lang!r}; it has {', '.join(self.languages)}")
        src = np.unique(np.concatenate([np.asarray(s, dtype=np.int64) for s in sources] or [np.zeros(0, np.int64)]))
        src = src[(src >= 0) & (src < self.vocab_size)]
        offsets, targets = self.offsets[lang], self.targets[lang]
        parts = [self.frequent[lang], np.asarray(ALWAYS, dtype=np.int32), src.astype(np.int32)]
        parts += [targets[offsets[s]:offsets[s + 1]] for s in src.tolist()]
        return np.unique(np.concatenate(parts))

    def save(self, path: str | Path) -> None:
        arrays = {"vocab_size": np.array(self.vocab_size)}
        for lang in self.languages:
            arrays |= {f"{lang}.frequent": self.frequent[lang], f"{lang}.offsets": self.offsets[lang],
                       f"{lang}.targets": self.targets[lang]}
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        Path(path).write_bytes(buf.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> Shortlist:
        with np.load(path, allow_pickle=False) as z:
            vocab_size = int(z["vocab_size"])
            langs = sorted({name.split(".")[0] for name in z.files if name != "vocab_size"})
            frequent = {lang: z[f"{lang}.frequent"] for lang in langs}
            offsets = {lang: z[f"{lang}.offsets"] for lang in langs}
            targets = {lang: z[f"{lang}.targets"] for lang in langs}
        for lang in langs:
            if offsets[lang].shape != (vocab_size + 1,) or offsets[lang][-1] != targets[lang].size:
                raise ValueError(f"{path}: the shortlist of {lang!r} is inconsistent (offsets vs targets)")
        return cls(vocab_size, frequent, offsets, targets)


def learn(pairs: Iterable[tuple[Sequence[int], Sequence[int], str]], vocab_size: int, frequent: int = FREQUENT,
          per_source: int = PER_SOURCE, min_cooccurrence: int = MIN_COOCCURRENCE) -> Shortlist:
    """A shortlist from ``(source ids, target ids, target language)`` training pairs."""
    by_lang: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for src, tgt, lang in pairs:
        by_lang.setdefault(lang, []).append((np.unique(np.asarray(src, dtype=np.int64)),
                                             np.unique(np.asarray(tgt, dtype=np.int64))))
    out_frequent, out_offsets, out_targets = {}, {}, {}
    for lang, rows in sorted(by_lang.items()):
        f, o, t = _learn_language(rows, vocab_size, frequent, per_source, min_cooccurrence)
        out_frequent[lang], out_offsets[lang], out_targets[lang] = f, o, t
    return Shortlist(vocab_size, out_frequent, out_offsets, out_targets)


def _learn_language(rows: list[tuple[np.ndarray, np.ndarray]], v: int, frequent: int, per_source: int,
                    min_cooccurrence: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    target_count = np.bincount(np.concatenate([t for _, t in rows]), minlength=v)[:v]
    top = np.argsort(-target_count, kind="stable")[:frequent]
    top_ids = np.sort(top[target_count[top] > 0]).astype(np.int32)
    # Sentences holding both s and t, counted as keys s * v + t in chunks of whole sentences.
    together = np.zeros(v * v, dtype=np.int32)
    keys: list[np.ndarray] = []
    held = 0
    for s, t in rows:
        keys.append((s[:, None] * v + t[None, :]).reshape(-1))
        held += keys[-1].size
        if held >= KEY_CHUNK:
            together += np.bincount(np.concatenate(keys), minlength=v * v).astype(np.int32)
            keys, held = [], 0
    if keys:
        together += np.bincount(np.concatenate(keys), minlength=v * v).astype(np.int32)
    together = together.reshape(v, v)
    together[:, top_ids] = 0  # in anyway
    together[:, list(ALWAYS)] = 0
    together[together < min_cooccurrence] = 0
    k = min(per_source, v)
    # p(t|s) = together[s, t] / (sentences holding s): for a given s it ranks t as the count does.
    best = np.argpartition(-together, k - 1, axis=1)[:, :k]  # (v, k)
    counts = np.take_along_axis(together, best, axis=1)
    order = np.lexsort((best, -counts), axis=1)  # best first, ties to the lower id
    best, counts = np.take_along_axis(best, order, axis=1), np.take_along_axis(counts, order, axis=1)
    keep = counts > 0
    offsets = np.zeros(v + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(keep.sum(axis=1))
    return top_ids, offsets, best[keep].astype(np.int32)
