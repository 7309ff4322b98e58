"""Language identification for the gateway's ``source: "auto"``: two identifiers from PyPI
compared on held-out lines, restricted to the languages the models serve (en, de, fr, es).

    python -m bench.langid_eval                 # 400 lines a language, long and cut to 3 words
    python -m bench.langid_eval --lines 100 --markdown

Lines are the Bible's test split (John, never trained on) in every language of the three
directions; "short" is each line's first three words, as a search box or a UI string gives
them. Cost is the mean time of one call on one text (long and short together), on this
machine, one thread. The gateway uses the winner (gateway/langid.py); docs/http-api.md keeps
the table this prints.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence

from corpus.bible import bible_pairs

LANGS = ("en", "de", "fr", "es")
Identify = Callable[[str], str]


def held_out(lines: int, seed: int = 0) -> dict[str, list[str]]:
    """Up to ``lines`` test-split lines a language, drawn at random (the same each run)."""
    texts: dict[str, set[str]] = {lang: set() for lang in LANGS}
    for p in bible_pairs(["en-de", "en-fr", "en-es"], "test"):
        texts[p.src_lang].add(p.src)
        texts[p.tgt_lang].add(p.tgt)
    rng = random.Random(seed)
    return {lang: rng.sample(sorted(t), min(lines, len(t))) for lang, t in texts.items()}


def short(text: str, words: int = 3) -> str:
    return " ".join(text.split()[:words])


def py3langid_identifier(langs: Sequence[str]) -> Identify:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ident.set_languages(list(langs))
    return lambda text: ident.classify(text)[0]


def langdetect_identifier(langs: Sequence[str]) -> Identify:
    from langdetect import DetectorFactory, LangDetectException, detect_langs

    DetectorFactory.seed = 0  # langdetect samples at random: seeded, a text gets one answer

    def identify(text: str) -> str:
        try:
            ranked = [x.lang for x in detect_langs(text) if x.lang in langs]
        except LangDetectException:
            return "?"
        return ranked[0] if ranked else "?"

    return identify


IDENTIFIERS: dict[str, Callable[[Sequence[str]], Identify]] = {
    "py3langid 0.4.0": py3langid_identifier,
    "langdetect 1.0.9": langdetect_identifier,
}


def evaluate(identify: Identify, data: dict[str, list[str]]) -> tuple[dict[str, tuple[float, float]], float]:
    """Accuracy per language (long, short) and the mean milliseconds of one call."""
    accuracy: dict[str, tuple[float, float]] = {}
    calls, spent = 0, 0.0
    for lang, lines in data.items():
        scores = []
        for cut in (lambda t: t, short):
            texts = [cut(t) for t in lines]
            start = time.perf_counter()
            answers = [identify(t) for t in texts]
            spent += time.perf_counter() - start
            calls += len(texts)
            scores.append(sum(a == lang for a in answers) / len(texts))
        accuracy[lang] = (scores[0], scores[1])
    return accuracy, 1000 * spent / calls


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, default=400, help="test lines a language (default 400)")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = p.parse_args(argv)
    data = held_out(args.lines)
    rows = []
    for name, make in IDENTIFIERS.items():
        start = time.perf_counter()
        identify = make(LANGS)
        identify("warm up")
        load = time.perf_counter() - start
        accuracy, ms = evaluate(identify, data)
        cells = [f"{100 * accuracy[lang][0]:.1f} / {100 * accuracy[lang][1]:.1f}" for lang in LANGS]
        mean_long = sum(a[0] for a in accuracy.values()) / len(accuracy)
        mean_short = sum(a[1] for a in accuracy.values()) / len(accuracy)
        rows.append([name, *cells, f"{100 * mean_long:.1f} / {100 * mean_short:.1f}", f"{ms:.3f}", f"{load:.2f}"])
    head = ["identifier", *(f"{lang} long / short %" for lang in LANGS), "mean long / short %", "ms a call",
            "load s"]
    print(f"{sum(len(v) for v in data.values())} lines ({', '.join(f'{k} {len(v)}' for k, v in data.items())}), "
          f"each whole and cut to 3 words; candidates {', '.join(LANGS)}")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        for r in [head, *rows]:
            print("  ".join(f"{c:>22}" if i else f"{c:<18}" for i, c in enumerate(r)))


if __name__ == "__main__":
    main()
