"""What the server must answer for one sentence, restated from docs/UNICODE.md and decoded
alone (greedy) through the engine: the reference for batching, sentence splitting, placeholder
protection and the checks after decoding."""

from __future__ import annotations

from pathlib import Path

from engine.decoding import DecodeOptions, Job, decode_all
from engine.defaults import default_max_len
from engine.package import ModelPackage
from engine.placeholders import Protected, Protector, faithful, remove, restore_checked
from engine.runtime import Runtime, RuntimeOptions
from engine.tokenizer import has_letter, normalize
from server.config import ServerConfig


class Alone:
    """One package's sentences translated one at a time, by the rule the server follows."""

    def __init__(self, package_dir: Path, max_output_tokens: int = ServerConfig().max_output_tokens) -> None:
        self.package = package = ModelPackage.load(package_dir)
        self.tok = tok = package.load_tokenizer()
        self.rt = Runtime(package, RuntimeOptions(device="cpu", threads=1))
        self.cap = min(max_output_tokens, package.max_target_tokens)
        self.protector = Protector.for_pieces(tok.piece_to_id, tok.unk_id())
        self.never = tok.not_text - {package.special_ids["eos"], package.special_ids["unk"]}
        self.placeholders = tok.placeholder_ids if self.protector.enabled else ()

    def tokens(self, p: Protected, tgt: str = "de") -> list[int]:
        """The greedy output of a sentence as protected (its placeholders, if any, at ``p.at``),
        the ids that are not text but eos, unknown and its own placeholders banned."""
        ids = self.package.special_ids
        src = self.package.source_ids(self.tok.encode(p.text, p.symbols), tgt)
        banned = tuple(sorted(self.never - set(self.placeholders[:len(p.originals)])))
        [[hyp]] = decode_all(self.rt, [Job(src, DecodeOptions(), max_len=default_max_len(len(src), self.cap),
                                           bos=ids["bos"], eos=ids["eos"], pad=ids["pad"], banned=banned)])
        return hyp.tokens

    def attempt(self, p: Protected, clean: str, tgt: str = "de") -> str | None:
        """One decode of the sentence ``clean`` (protected as ``p``) and its check: None when a
        placeholder is not back exactly once, a number is not in ``clean``, or (with the
        placeholders) a span of ``clean`` is not in it."""
        out = self.tok.decode(self.tokens(p, tgt))
        if p.originals:
            checked = restore_checked(out, p.originals)
            if checked is None:
                return None
            out = checked
        out = remove(out, self.tok.symbol_pattern(), lambda m: m.group() if m.group() in clean else None)
        return out if faithful(out, clean, spans=self.protector.enabled) else None

    def sentence(self, text: str, tgt: str = "de") -> str:
        """What the server answers for the sentence ``text``: as it came when it has no letter;
        else protected, checked, again with its spans as text when that fails, and as it came
        when that fails too."""
        clean = normalize(text)
        if not has_letter(clean):
            return text
        p = self.protector.protect(clean)
        out = self.attempt(p, clean, tgt)
        if out is None and p.originals:
            out = self.attempt(Protected(clean, ()), clean, tgt)
        return text if out is None else out
