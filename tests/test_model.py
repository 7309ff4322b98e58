"""The architecture: positions, masks, the cache, shared embeddings, parameter count."""

from __future__ import annotations

import math

import pytest
import torch

from training.config import MODEL_PRESETS, PAD_ID, ModelConfig
from training.model import Transformer, count_parameters, scaled_dot_product_attention, sinusoidal_table

TINY = ModelConfig(vocab_size=50, d_model=16, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, d_ff=32,
                   dropout=0.0, max_positions=64)


def make_model(cfg: ModelConfig = TINY, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(cfg).eval()


def test_positional_encoding_equals_the_formula():
    d = 16
    table = sinusoidal_table(50, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_attention_is_softmax_of_scaled_scores():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    out, w = scaled_dot_product_attention(q, k.transpose(-1, -2), v, None)  # keys come transposed
    expected_w = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)
    assert torch.allclose(w, expected_w, atol=1e-6)
    assert torch.allclose(out, expected_w @ v, atol=1e-6)


def test_fully_masked_row_gives_no_nan():
    q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    mask = torch.zeros(1, 1, 2, 3, dtype=torch.bool)
    out, w = scaled_dot_product_attention(q.half(), k.half().transpose(-1, -2), v.half(), mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()


def test_causal_mask_later_tokens_do_not_change_earlier_outputs():
    model = make_model()
    src = torch.tensor([[5, 6, 7, 8, 3]])
    tgt = torch.tensor([[2, 10, 11, 12, 13, 14]])
    changed = tgt.clone()
    changed[0, 4:] = torch.tensor([40, 41])
    a, b = model(src, tgt), model(src, changed)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:], atol=1e-3)


def test_padding_leaves_real_token_outputs_unchanged():
    model = make_model()
    src = torch.tensor([[5, 6, 7, 3]])
    src_padded = torch.tensor([[5, 6, 7, 3, PAD_ID, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[2, 10, 11, 12]])
    tgt_padded = torch.tensor([[2, 10, 11, 12, PAD_ID, PAD_ID]])
    plain = model(src, tgt)
    assert torch.allclose(model(src_padded, tgt), plain, atol=1e-5)
    assert torch.allclose(model(src_padded, tgt_padded)[:, :4], plain, atol=1e-5)
    memory = model.encode(src)
    assert torch.allclose(model.encode(src_padded)[:, :4], memory, atol=1e-5)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_incremental_decoding_with_cache_equals_full_decoder(pre_norm):
    cfg = ModelConfig(**{**TINY.__dict__, "pre_norm": pre_norm})
    model = make_model(cfg)
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[2, 11, 12, 13, 14], [2, 15, 16, 17, 18]])
    full = model(src, tgt)  # (B, T, V)
    src_mask = src.ne(PAD_ID)
    cross_k, cross_v = model.cross_kv(model.encode(src, src_mask))
    past_k, past_v, past_mask = model.empty_cache(2)
    for t in range(tgt.size(1)):
        out = model.decode_step(tgt[:, t:t + 1], torch.full((2, 1), t), past_mask, src_mask, cross_k, cross_v,
                                past_k, past_v)
        assert torch.allclose(model.project(out.hidden[:, -1]), full[:, t], atol=1e-5)
        assert [k.shape for k in out.new_k] == [(2, 2, 8, 1)] * 2  # per layer (B, H, Dh, T): keys transposed
        assert [v.shape for v in out.new_v] == [(2, 2, 1, 8)] * 2  # per layer (B, H, T, Dh)
        past_k = [torch.cat([p, n], dim=3) for p, n in zip(past_k, out.new_k)]
        past_v = [torch.cat([p, n], dim=2) for p, n in zip(past_v, out.new_v)]
        past_mask = torch.ones(2, t + 1, dtype=torch.bool)
        assert out.cross_attention.shape == (2, 1, 5)
        assert torch.allclose(out.cross_attention.sum(-1), torch.ones(2, 1), atol=1e-5)
        assert out.cross_attention[1, 0, 3:].abs().max() == 0  # padding gets no attention


def test_rows_at_different_past_lengths_share_a_step():
    """A masked-out cache slot behaves as if it did not exist (what continuous batching needs)."""
    model = make_model()
    src = torch.tensor([[5, 6, 7, 3]])
    src_mask = src.ne(PAD_ID)
    ck, cv = model.cross_kv(model.encode(src))
    tgt = torch.tensor([[2, 11, 12]])
    pk, pv, pm = model.empty_cache(1)
    first = model.decode_step(tgt[:, :2], torch.tensor([[0, 1]]), pm, src_mask, ck, cv, pk, pv)
    alone = model.decode_step(tgt[:, 2:], torch.tensor([[2]]), torch.ones(1, 2, dtype=torch.bool), src_mask, ck, cv,
                              first.new_k, first.new_v)
    # The same cache with junk slots around it (masked out) and its columns in another
    # order: the positions are the tokens' own, so the cache is a set of slots.
    order = [2, 0, 3, 1]  # junk, cached 0, junk, cached 1

    def shuffled(cache, dim):  # keys (B, H, Dh, P): slots on dim 3; values (B, H, P, Dh): dim 2
        return [torch.cat([c, torch.randn(c.transpose(2, dim).shape).transpose(2, dim)], dim=dim).index_select(
            dim, torch.tensor(order)) for c in cache]
    mask = torch.tensor([[False, True, False, True]])
    shifted = model.decode_step(tgt[:, 2:], torch.tensor([[2]]), mask, src_mask, ck, cv, shuffled(first.new_k, 3),
                                shuffled(first.new_v, 2))
    assert torch.allclose(model.project(alone.hidden), model.project(shifted.hidden), atol=1e-5)


def test_rows_sharing_a_source_equal_rows_with_their_own_copy():
    """Cross keys/values of C sources for B = C x G rows (a job's beams share their source's):
    row r reads source r // G, exactly as if each row had its own copy."""
    model = make_model()
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, PAD_ID, PAD_ID]])
    src_mask = src.ne(PAD_ID)
    cross_k, cross_v = model.cross_kv(model.encode(src, src_mask))
    rows = src_mask.repeat_interleave(3, dim=0)  # 2 sources x 3 rows each; masks stay per row
    ids, positions = torch.tensor([[2], [11], [12], [2], [15], [16]]), torch.full((6, 1), 0)
    past_k, past_v, past_mask = model.empty_cache(6)
    shared = model.decode_step(ids, positions, past_mask, rows, cross_k, cross_v, past_k, past_v)
    tiled = model.decode_step(ids, positions, past_mask, rows, [c.repeat_interleave(3, dim=0) for c in cross_k],
                              [c.repeat_interleave(3, dim=0) for c in cross_v], past_k, past_v)
    def close(a: torch.Tensor, b: torch.Tensor) -> bool:  # the same bits in onnxruntime: tests/test_quantize.py
        return torch.allclose(a, b, atol=1e-6)

    assert close(shared.hidden, tiled.hidden) and close(shared.cross_attention, tiled.cross_attention)
    assert all(close(a, b) for a, b in zip(shared.new_k + shared.new_v, tiled.new_k + tiled.new_v))
    assert shared.cross_attention[3:, 0, 3:].abs().max() == 0  # the second source's padding, in its three rows


@pytest.mark.parametrize("t", [2, 1])  # 1: a decoding step, whose own score is an elementwise product
def test_attention_over_a_cache_equals_attention_over_concatenated_keys(t):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, t, 8, generator=g) for _ in range(3))  # (B, H, T, Dh)
    pk, pv = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(2))  # (B, H, P, Dh)
    past_mask = torch.tensor([[True, True, False, True, True], [False, False, True, True, True]])[:, None, None]
    causal = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
    kt, pkt = k.transpose(2, 3), pk.transpose(2, 3)  # keys are passed transposed
    out, weights = scaled_dot_product_attention(q, kt, v, causal, cache=(pkt, pv, past_mask))
    mask = torch.cat([past_mask.expand(2, 1, t, 5), causal.expand(2, 1, t, t)], dim=-1)
    ref_out, ref_weights = scaled_dot_product_attention(q, torch.cat([pkt, kt], 3), torch.cat([pv, v], 2), mask)
    assert torch.allclose(out, ref_out, atol=1e-6)
    assert torch.allclose(weights, ref_weights, atol=1e-6)
    assert weights[1, :, :, :2].abs().max() == 0  # masked cache slots get no weight


def test_embeddings_are_shared_and_scaled():
    model = make_model()
    assert model.project(torch.eye(16)).shape == (16, 50)
    ids = torch.tensor([[7]])
    x = model.embed(ids, torch.tensor([[0]]))
    expected = model.embedding.weight[7] * 4.0 + sinusoidal_table(1, 16)[0]
    assert torch.allclose(x[0, 0], expected, atol=1e-6)
    names = [n for n, _ in model.named_parameters()]
    assert sum("embedding" in n for n in names) == 1  # one matrix for source, target and output


def test_base_parameter_count_matches_the_formula():
    vocab = 37000
    cfg = ModelConfig(**{**MODEL_PRESETS["base"].__dict__, "vocab_size": vocab})
    d, ff, n = cfg.d_model, cfg.d_ff, 6
    attention = 4 * (d * d + d)
    ffn = d * ff + ff + ff * d + d
    norm = 2 * d
    encoder = n * (attention + ffn + 2 * norm)
    decoder = n * (2 * attention + ffn + 3 * norm)
    assert count_parameters(Transformer(cfg)) == vocab * d + encoder + decoder
    assert (d, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, ff) == (512, 8, 6, 6, 2048)
