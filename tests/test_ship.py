"""Shipping a model: half-precision weights, readable side files, sha256 checked on load."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from training.checkpoint import SUMS_FILE, load, load_model, resolve
from training.ship import ship


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, tiny_checkpoint):
    out = tmp_path_factory.mktemp("shipped") / "default"
    ship(tiny_checkpoint, out)
    return out


def test_ship_writes_half_weights_config_tokenizer_and_sums(shipped, tiny_checkpoint):
    names = sorted(p.name for p in shipped.iterdir())
    assert {"model.pt", "config.json", "tokenizer.model", SUMS_FILE} <= set(names)
    ckpt = load(shipped / "model.pt")
    assert all(v.dtype == torch.float16 for v in ckpt["model"].values() if v.is_floating_point())
    assert "optimizer" not in ckpt
    assert (shipped / "tokenizer.model").read_bytes() == ckpt["tokenizer_model"]
    listed = [line.split("  ")[1] for line in (shipped / SUMS_FILE).read_text().splitlines()]
    assert listed == sorted(n for n in names if n != SUMS_FILE)
    assert resolve(shipped) == shipped / "model.pt"


def test_shipped_model_computes_what_the_original_did(shipped, tiny_checkpoint):
    full, _, _ = load_model(tiny_checkpoint)
    half, _, _ = load_model(shipped)
    src = torch.tensor([[5, 6, 7, 8, 3]])
    tgt = torch.tensor([[2, 9, 10]])
    a, b = full(src, tgt), half(src, tgt)
    assert b.dtype == torch.float32
    assert torch.allclose(a, b, atol=2e-2)
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_a_changed_file_fails_before_unpickling(shipped, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(shipped, copy)
    data = bytearray((copy / "model.pt").read_bytes())
    data[-10] ^= 0xFF
    (copy / "model.pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model.pt: sha256 [0-9a-f]{64} does not match [0-9a-f]{64} in .*SHA256SUMS; "
                                         "the file is corrupt or was replaced"):
        load(copy / "model.pt")
    (copy / "other.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"other\.pt is not listed in"):
        load(copy / "other.pt")


def test_ship_interpolates_two_models_tensor_by_tensor(tiny_checkpoint, tmp_path):
    ckpt = load(tiny_checkpoint)
    shifted = {k: (v.float() + 1.0 if v.is_floating_point() else v) for k, v in ckpt["model"].items()}
    other = tmp_path / "other.pt"
    torch.save({**ckpt, "model": shifted}, other)
    path = ship(tiny_checkpoint, tmp_path / "mixed", other, 0.25)
    mixed = load(path)
    assert mixed["interpolated"] == {"with": "other.pt", "weight": 0.25}  # tmp_path is absolute: its name only
    for k, v in ckpt["model"].items():
        if v.is_floating_point():
            want = (0.25 * v.float() + 0.75 * (v.float() + 1.0)).half()
            assert torch.equal(mixed["model"][k], want), k


def test_shipped_config_records_no_absolute_path_of_the_training_machine(tiny_checkpoint, tmp_path):
    ckpt = load(tiny_checkpoint)
    config = {**ckpt["config"], "train": {**ckpt["config"]["train"], "init_from": "/somewhere/lease/init"}}
    run = tmp_path / "run.pt"
    torch.save({**ckpt, "config": config}, run)
    path = ship(run, tmp_path / "out")
    assert load(path)["config"]["train"]["init_from"] == "init"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["train"]["init_from"] == "init"
    config["train"]["init_from"] = "models/default"  # relative: kept as it is
    torch.save({**ckpt, "config": config}, run)
    assert load(ship(run, tmp_path / "out2"))["config"]["train"]["init_from"] == "models/default"


def test_interpolating_models_of_another_shape_is_refused(tiny_checkpoint, tmp_path, capsys):
    from training.ship import main

    ckpt = load(tiny_checkpoint)
    k = next(k for k, v in ckpt["model"].items() if v.dim() == 2)
    other = tmp_path / "other.pt"
    torch.save({**ckpt, "model": {**ckpt["model"], k: torch.zeros(3, 3)}}, other)
    with pytest.raises(SystemExit) as caught:
        main([str(tiny_checkpoint), str(tmp_path / "out"), "--interpolate", str(other), "--weight", "0.7"])
    assert caught.value.code == 2
    shape = tuple(ckpt["model"][k].shape)
    assert f"the two models differ in shape: {k} {shape} against (3, 3)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"--weight 1\.5: it must be between 0 and 1"):
        ship(tiny_checkpoint, tmp_path / "out", tiny_checkpoint, 1.5)


def test_several_sources_ship_the_mean_of_their_weights_with_the_last_ones_config(tiny_checkpoint, tmp_path, capsys):
    from training.ship import main

    ckpt = load(tiny_checkpoint)
    later = tmp_path / "later.pt"
    shifted = {k: (v.float() + 2.0 if v.is_floating_point() else v) for k, v in ckpt["model"].items()}
    torch.save({**ckpt, "model": shifted, "step": 9}, later)
    assert main([str(tiny_checkpoint), str(later), str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["wrote"] == str(tmp_path / "out" / "model.pt")
    averaged = load(tmp_path / "out" / "model.pt")
    assert averaged["averaged"] == [tiny_checkpoint.name, "later.pt"]  # absolute paths: names only
    assert (averaged["step"], averaged["source"]) == (9, "later.pt")
    both = load(ship([tiny_checkpoint, later], tmp_path / "mixed", tiny_checkpoint, 0.5))
    for k, v in ckpt["model"].items():
        if v.is_floating_point():
            mean = ((v.double() + shifted[k].double()) / 2).float()  # summed in float64, as checkpoint.average does
            assert torch.equal(averaged["model"][k], mean.half()), k
            assert torch.equal(both["model"][k], (0.5 * mean + 0.5 * v.float()).half()), k  # then interpolated


def test_averaging_checkpoints_of_another_model_is_refused(tiny_checkpoint, tmp_path, capsys):
    from training.ship import main

    ckpt = load(tiny_checkpoint)
    other = tmp_path / "other.pt"
    torch.save({**ckpt, "tokenizer_model": b"another"}, other)
    with pytest.raises(SystemExit) as caught:
        main([str(tiny_checkpoint), str(other), str(tmp_path / "out")])
    assert caught.value.code == 2
    assert f"other.pt has another tokenizer than {tiny_checkpoint.name}: only checkpoints of one model can be " \
           "averaged" in capsys.readouterr().err
    k = next(k for k, v in ckpt["model"].items() if v.dim() == 2)
    torch.save({**ckpt, "model": {**ckpt["model"], k: torch.zeros(3, 3)}}, other)
    with pytest.raises(ValueError, match=rf"other\.pt and {tiny_checkpoint.name} differ in shape: {k} \(3, 3\)"):
        ship([tiny_checkpoint, other], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_grown_model_interpolates_with_the_model_it_grew_from(tmp_path, tokenizer):
    """The old model is grown the same way first: its new layers are identities, so a new layer ships at
    weight x what it learned and every old tensor at the plain mix."""
    from training import checkpoint as ckpt_io
    from training.config import MODEL_PRESETS, RunConfig, replace
    from training.model import Transformer
    from training.warm_start import warm_start

    cfg = RunConfig(model=replace(MODEL_PRESETS["tiny"], vocab_size=tokenizer.vocab_size, pre_norm=True))
    old = Transformer(cfg.model)
    ckpt_io.save_atomic({"model": old.state_dict(), "config": cfg.to_dict(),
                         "tokenizer_model": tokenizer.model_proto}, tmp_path / "old.pt")
    big = RunConfig(model=replace(cfg.model, n_decoder_layers=3))
    grown = Transformer(big.model)
    warm_start(grown, tokenizer, str(tmp_path / "old.pt"))
    trained = {k: v + 0.5 for k, v in grown.state_dict().items()}  # as if training moved every weight
    ckpt_io.save_atomic({"model": trained, "config": big.to_dict(), "tokenizer_model": tokenizer.model_proto},
                        tmp_path / "grown.pt")
    mixed = load(ship(tmp_path / "grown.pt", tmp_path / "out", tmp_path / "old.pt", 0.75))
    assert mixed["interpolated"]["grown"] == "grown (decoder layers 2 -> 3; new parts start as identities)"
    new_out = "decoder_layers.1.feed_forward.w_2.weight"  # layer 1 is the new one: its output started at zero
    assert torch.equal(mixed["model"][new_out], (0.75 * trained[new_out]).half())
    kept = "decoder_layers.2.cross_attn.w_q.weight"  # the old top layer, now layer 2
    want = 0.75 * trained[kept] + 0.25 * old.state_dict()["decoder_layers.1.cross_attn.w_q.weight"]
    assert torch.equal(mixed["model"][kept], want.half())
    with pytest.raises(ValueError, match=r"not shrink it \(decoder layers 3 -> 2\)"):
        ship(tmp_path / "old.pt", tmp_path / "out2", tmp_path / "grown.pt", 0.5)
