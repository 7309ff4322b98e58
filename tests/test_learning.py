"""A tiny Transformer learns to reverse sequences: loss goes near zero and greedy decoding is exact."""

from __future__ import annotations

import torch

from training.config import BOS_ID, EOS_ID, ModelConfig
from training.data import Example, collate
from training.decode import beam_search, greedy_search
from training.model import Transformer
from training.train import label_smoothed_loss, noam_lr


def reverse_examples(n: int, seed: int) -> list[Example]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(3, 8, (1,), generator=g))
        seq = torch.randint(4, 20, (length,), generator=g).tolist()
        out.append(Example([*seq, EOS_ID], seq[::-1]))
    return out


def test_tiny_model_learns_to_reverse():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=20, d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=128,
                      dropout=0.0, max_positions=32)
    model = Transformer(cfg)
    opt = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    train = reverse_examples(2000, seed=1)
    losses = []
    for step in range(1, 801):
        for g in opt.param_groups:
            g["lr"] = noam_lr(step, cfg.d_model, warmup=100, scale=0.3)
        idx = torch.randint(0, len(train), (64,)).tolist()
        batch = collate([train[i] for i in idx])
        loss = label_smoothed_loss(model(batch.src, batch.tgt_in), batch.tgt_out, 0.0) / batch.n_tokens
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-50:]) / 50 < 0.05
    model.eval()
    test = reverse_examples(50, seed=2)
    src = collate(test).src
    # Which one or two of 50 reversals a net this small gets wrong after 800 steps depends on the
    # CPU's kernels (one machine missed index 35 every time): the test asserts that it learned
    # the task, not which tokens its last bits produce.
    greedy = greedy_search(model, src)
    assert sum(h.tokens == e.tgt for h, e in zip(greedy, test)) >= 47
    beams = beam_search(model, src, beam_size=3, n_best=2)
    assert sum(nb[0].tokens == e.tgt for nb, e in zip(beams, test)) >= 47
    assert all(len(nb) == 2 and nb[0].score >= nb[1].score for nb in beams)
    assert BOS_ID not in greedy[0].tokens
