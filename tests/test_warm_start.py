"""Warm start across a change of vocabulary, the mixed corpus, byte fallback and CPU bf16."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from corpus.bible import Pair
from engine.placeholders import SYMBOLS
from tests.conftest import bible_sentences
from training import checkpoint as ckpt_io
from training.config import MODEL_PRESETS, UNK_ID, DataConfig, RunConfig, replace
from training.data import encode_pairs, mix
from training.model import Transformer
from training.tokenizer import train_tokenizer
from training.warm_start import map_embeddings, piece_text, warm_start


@pytest.fixture(scope="module")
def new_tokenizer(tmp_path_factory):
    """A byte-fallback tokenizer with the placeholder symbols, on another text mix."""
    sentences = bible_sentences("4", 1500) + bible_sentences("e", 1500) + [
        "Click OK to save the document.", "Klicken Sie auf OK, um das Dokument zu speichern."] * 50
    return train_tokenizer(sentences, tmp_path_factory.mktemp("newtok") / "spm", vocab_size=600,
                           languages=["en", "de"], byte_fallback=True, symbols=SYMBOLS)


def test_byte_fallback_loses_no_character(new_tokenizer):
    text = "€ 5 @ {x} <y> 😀 ß"
    ids = new_tokenizer.encode(text)
    assert UNK_ID not in ids
    assert new_tokenizer.decode(ids) == text
    assert new_tokenizer.pieces(new_tokenizer.encode("<ph3>")) == ["▁", "<ph3>"]  # one piece, never split
    assert new_tokenizer.protector.enabled


def test_tokenizer_without_symbols_has_no_protection(tokenizer):
    assert not tokenizer.protector.enabled
    assert tokenizer.protector.protect("see http://a.org").text == "see http://a.org"


def test_piece_text():
    assert piece_text("▁the") == " the"
    assert piece_text("<0x41>") == "A"
    assert piece_text("<0xC3>") is None  # half a character
    assert piece_text("<ph1>") is None and piece_text("<2de>") is None


def test_embeddings_carry_over_by_piece(tokenizer, new_tokenizer):
    old = torch.randn(tokenizer.vocab_size, 8)
    new, counts = map_embeddings(old, tokenizer, new_tokenizer)
    assert new.shape == (new_tokenizer.vocab_size, 8)
    assert sum(counts.values()) == new_tokenizer.vocab_size and counts["copied"] > 100
    for piece in ("▁God", "<2de>", "</s>"):
        i, j = new_tokenizer.sp.piece_to_id(piece), tokenizer.sp.piece_to_id(piece)
        assert j != UNK_ID and torch.equal(new[i], old[j]), piece
    assert torch.all(new[0] == 0)  # pad
    # a piece the old vocabulary lacks is the mean of the old pieces that spell it
    piece = next(p for p in (new_tokenizer.sp.id_to_piece(i) for i in range(4, new_tokenizer.vocab_size))
                 if tokenizer.sp.piece_to_id(p) == UNK_ID and (t := piece_text(p)) and len(t.strip()) > 3)
    spelled = [k for k in tokenizer.sp.encode(piece_text(piece).strip(), out_type=int) if k != UNK_ID]
    spelled = [k for k in spelled if tokenizer.sp.id_to_piece(k) != "▁"] or spelled
    assert torch.allclose(new[new_tokenizer.sp.piece_to_id(piece)], old[spelled].mean(0))


def test_warm_start_loads_every_other_weight(tmp_path: Path, tokenizer, new_tokenizer):
    cfg = RunConfig(model=replace(MODEL_PRESETS["tiny"], vocab_size=tokenizer.vocab_size))
    old = Transformer(cfg.model)
    ckpt_io.save_atomic({"model": old.state_dict(), "config": cfg.to_dict(),
                         "tokenizer_model": tokenizer.model_proto}, tmp_path / "old.pt")
    new = Transformer(replace(cfg.model, vocab_size=new_tokenizer.vocab_size))
    note = warm_start(new, new_tokenizer, str(tmp_path / "old.pt"))
    assert note.startswith(f"{new_tokenizer.vocab_size} embedding rows: ")
    for k, v in old.state_dict().items():
        if k != "embedding.weight":
            assert torch.equal(new.state_dict()[k], v), k
    wide = Transformer(replace(MODEL_PRESETS["small"], vocab_size=new_tokenizer.vocab_size))
    with pytest.raises(ValueError, match="another shape"):
        warm_start(wide, new_tokenizer, str(tmp_path / "old.pt"))


def test_mix_takes_shares():
    pairs = [Pair("en", "de", str(i), str(i)) for i in range(10)]
    assert mix(pairs, 1.0, seed=1) == pairs
    assert len(mix(pairs, 0.3, seed=1)) == 3 and mix(pairs, 0.3, seed=1) == mix(pairs, 0.3, seed=1)
    twice = mix(pairs, 2.5, seed=1)
    assert len(twice) == 25 and twice[:20] == pairs * 2


def test_mixed_corpus_needs_sources():
    from cli import UsageError
    from training.data import load_pairs

    with pytest.raises(UsageError, match=r"needs data\.sources"):
        load_pairs(DataConfig(corpus="mixed"), "train")


def test_training_pairs_copy_placeholders(new_tokenizer):
    pairs = [Pair("en", "de", "Open http://a.org/x in 5 s, not 15.", "Öffnen Sie http://a.org/x in 5 s, nicht 15.")]
    (ex,) = encode_pairs(pairs, new_tokenizer, 200, protect=True)
    src = new_tokenizer.pieces(ex.src)
    tgt = new_tokenizer.pieces(ex.tgt)
    assert [p for p in src if p.startswith("<ph")] == ["<ph1>", "<ph2>", "<ph3>"]
    assert [p for p in tgt if p.startswith("<ph")] == ["<ph1>", "<ph2>", "<ph3>"]
    (plain,) = encode_pairs(pairs, new_tokenizer, 200)
    assert not any(p.startswith("<ph") for p in new_tokenizer.pieces(plain.src))


def test_a_direction_of_a_source_takes_its_own_share():
    from cli import UsageError
    from training.data import check_corpus, load_pairs, mixed_pairs

    cfg = DataConfig(corpus="mixed", directions=("en-de", "de-en"), sources={"bible": 0.5})
    whole = replace(cfg, sources={"bible": 1.0})
    base = {d: sum(p.direction == d for p in load_pairs(whole, "train")) for d in cfg.directions}
    cfg2 = replace(cfg, sources={"bible": 0.5, "bible/de-en": 2.0})
    (got,) = mixed_pairs(cfg2, "train").values()
    counts = {d: sum(p.direction == d for p in got) for d in cfg.directions}
    assert counts["en-de"] == round(0.5 * base["en-de"])  # the source's own share
    assert counts["de-en"] == 2 * base["de-en"]  # twice every pair, not half
    de_en = Counter(p for p in load_pairs(whole, "train") if p.direction == "de-en")
    assert Counter(p for p in got if p.direction == "de-en") == Counter({p: 2 * n for p, n in de_en.items()})
    assert mixed_pairs(cfg2, "test") == mixed_pairs(cfg, "test")  # shares are for training only
    with pytest.raises(UsageError, match=r"'bible/fr-en' but 'fr-en' is not one of the run's directions \(en-de"):
        mixed_pairs(replace(cfg, sources={"bible": 0.5, "bible/fr-en": 1.0}), "train")
    with pytest.raises(UsageError, match=r"has 'libreoffice-help/de-en' but not the source 'libreoffice-help' itself"):
        mixed_pairs(replace(cfg, sources={"bible": 0.5, "libreoffice-help/de-en": 1.0}), "train")
    with pytest.raises(UsageError, match=r"has 'libreoffice-help/de-en' but not the source"):  # before a run starts
        check_corpus(replace(cfg, sources={"bible": 0.5, "libreoffice-help/de-en": 1.0}))


def _save(model: Transformer, cfg: RunConfig, tokenizer, path: Path) -> str:
    ckpt_io.save_atomic({"model": model.state_dict(), "config": cfg.to_dict(),
                         "tokenizer_model": tokenizer.model_proto}, path)
    return str(path)


def _pre_ln_tiny(tokenizer) -> RunConfig:
    return RunConfig(model=replace(MODEL_PRESETS["tiny"], vocab_size=tokenizer.vocab_size, pre_norm=True,
                                   n_encoder_layers=2, n_decoder_layers=2))


def test_a_grown_model_computes_what_the_old_one_did(tmp_path: Path, tokenizer):
    """Two more decoder layers, one more encoder layer and a wider feed-forward: the same logits and the
    same cross-attention (the old top layer stays on top), and the new layers can still learn."""
    cfg = _pre_ln_tiny(tokenizer)
    torch.manual_seed(3)
    old = Transformer(cfg.model).eval()
    for p in old.parameters():  # trained-looking weights, not the initialisation's zeros and ones
        p.data.add_(0.05 * torch.randn_like(p))
    old.embedding.weight.data[0] = 0.0  # the pad row, which a warm start always zeroes
    path = _save(old, cfg, tokenizer, tmp_path / "old.pt")
    big = replace(cfg.model, n_encoder_layers=3, n_decoder_layers=4, d_ff=96)
    new = Transformer(big).eval()
    note = warm_start(new, tokenizer, path)
    assert note.endswith("; grown (encoder layers 2 -> 3, decoder layers 2 -> 4, d_ff 64 -> 96; "
                         "new parts start as identities)")
    src = torch.randint(4, tokenizer.vocab_size, (3, 7))
    tgt = torch.randint(4, tokenizer.vocab_size, (3, 5))
    with torch.no_grad():
        assert torch.allclose(new(src, tgt), old(src, tgt), atol=1e-5)
        memory_old, memory_new = old.encode(src), new.encode(src)
        assert torch.allclose(memory_new, memory_old, atol=1e-5)
    state, before = new.state_dict(), old.state_dict()
    # the old top decoder layer is the new top layer; layers 1 and 2 are new, copies of layer 0 with zero outputs
    top = "cross_attn.w_q.weight"
    assert torch.equal(state[f"decoder_layers.3.{top}"], before[f"decoder_layers.1.{top}"])
    for i in (1, 2):
        query = "self_attn.w_q.weight"
        assert torch.equal(state[f"decoder_layers.{i}.{query}"], before[f"decoder_layers.0.{query}"])
        for part in ("self_attn.w_o", "cross_attn.w_o", "feed_forward.w_2"):
            assert not state[f"decoder_layers.{i}.{part}.weight"].any(), part
            assert not state[f"decoder_layers.{i}.{part}.bias"].any(), part
    new.train()
    loss = new(src, tgt).logsumexp(-1).mean()
    loss.backward()
    assert new.decoder_layers[1].feed_forward.w_2.weight.grad.abs().sum() > 0
    assert new.encoder_layers[0].feed_forward.w_2.weight.grad[:, 64:].abs().sum() > 0


def test_growth_refuses_what_it_cannot_do(tmp_path: Path, tokenizer):
    cfg = _pre_ln_tiny(tokenizer)
    path = _save(Transformer(cfg.model), cfg, tokenizer, tmp_path / "old.pt")
    with pytest.raises(ValueError, match=r"not shrink it \(decoder layers 2 -> 1\)"):
        warm_start(Transformer(replace(cfg.model, n_decoder_layers=1)), tokenizer, path)
    with pytest.raises(ValueError, match=r"another shape \(n_heads 2 -> 4\); a warm start may change only"):
        warm_start(Transformer(replace(cfg.model, n_heads=4)), tokenizer, path)
    post = RunConfig(model=replace(cfg.model, pre_norm=False))
    post_path = _save(Transformer(post.model), post, tokenizer, tmp_path / "post.pt")
    with pytest.raises(ValueError, match=r"^--init-from .*post.pt: only a pre-LN model can grow"):
        warm_start(Transformer(replace(post.model, n_decoder_layers=3)), tokenizer, post_path)
