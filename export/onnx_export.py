"""``nmt-export``: a training checkpoint -> a model package the server loads without torch.

    nmt-export runs/small-ende packages/small-ende [--int8] [--fp16] [--force]

A fixed pipeline: load -> validate (collect every error) -> export the encoder and the
decoder-step graphs, and the device-resident step and rows graphs (export/resident.py) ->
check them against PyTorch at sizes other than the traced ones ->
derive variants (int8, fp16) -> write tokenizer and manifest (with sha256 of every file).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ArgumentParser, exit_status_help, fail, parse_direction
from engine import contract
from engine.defaults import SPECIAL_IDS
from engine.package import Dimensions, Manifest, ModelPackage, write_manifest
from export.examples import example_inputs
from export.parity import Worst, same_choices
from training import checkpoint as ckpt_io
from training.config import EOS_ID, ModelConfig, RunConfig
from training.model import Transformer
from training.tokenizer import Tokenizer

OPSET = 18


class EncoderGraph(nn.Module):
    """src_ids (B, S) -> cross_k_0.. (B, H, Dh, S), cross_v_0.. (B, H, S, Dh)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, ...]:
        src_mask = src_ids.ne(self.model.cfg.pad_id)
        ks, vs = self.model.cross_kv(self.model.encode(src_ids, src_mask))
        return (*ks, *vs)


class DecoderStepGraph(nn.Module):
    """One decoder step over a key/value cache; see engine/contract.py for the shapes.
    ``caches`` are the per-layer cross_k, cross_v, past_k, past_v tensors, in that order.

    Two layout choices for the runtime, same values as ``Transformer.project`` + log-softmax:
    the output projection gets its own copy of the shared embedding, stored transposed
    (D, V), so onnxruntime multiplies by a constant it packs once instead of transposing
    the (V, D) table at every step (fp32, 32 rows: 0.92 -> 0.56 ms of a 4.6 ms step); and
    the graph ends in LogSoftmax, so the decoding loop gets log-probabilities without a
    pass over (B, V) in numpy.
    """

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("output_weight", model.embedding.weight.detach().t().contiguous(), persistent=False)

    def forward(self, input_ids: Tensor, positions: Tensor, past_mask: Tensor, src_mask: Tensor,
                *caches: Tensor) -> tuple[Tensor, ...]:
        n = self.model.cfg.n_decoder_layers
        cross_k, cross_v, past_k, past_v = (caches[i * n:(i + 1) * n] for i in range(4))
        out = self.model.decode_step(input_ids, positions, past_mask, src_mask, cross_k, cross_v, past_k, past_v)
        logits = torch.matmul(out.hidden[:, -1], self.output_weight)  # (B, V)
        if self.model.output_bias is not None:
            logits = logits + self.model.output_bias
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        return (log_probs, *out.new_k, *out.new_v, out.cross_attention[:, -1])


class _DropTorchvisionNotices(logging.Filter):
    """torch.onnx logs "torchvision is not installed. Skipping torchvision::nms" (and three more
    ops) at every export, on a handler of its own; our graphs use no torchvision op."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("torchvision is not installed")


logging.getLogger("torch.onnx._internal.exporter._registration").addFilter(_DropTorchvisionNotices())


@contextlib.contextmanager
def _quiet():
    """The exporter prints progress and warnings of its own; keep them out of the user's way."""
    root = logging.getLogger()
    level = root.level
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        root.setLevel(logging.ERROR)
        try:
            yield
        finally:
            root.setLevel(level)


def export_graphs(model: Transformer, out_dir: Path, opset: int = OPSET) -> tuple[Path, Path]:
    """Export both graphs with dynamic batch, source and past lengths; one new token per step.

    The dynamo exporter fixes any example dimension of size 1, so the examples use sizes
    of at least 2, and all different (B=9 rows over C=3 sources, S=5, P=4), so that no two
    axes are unified, except the new-token axis, fixed to 1 on purpose: onnxruntime then
    knows the per-head transposes of a single token move no data. The encoder is traced
    at B=2.
    """
    model = model.eval()
    batch, src = torch.export.Dim("batch"), torch.export.Dim("src_len")
    past, sources = torch.export.Dim("past_len"), torch.export.Dim("sources")
    enc_path = out_dir / contract.graph_file(contract.ENCODER)
    dec_path = out_dir / contract.graph_file(contract.DECODER)
    names = contract.graph_names(model.cfg.n_decoder_layers)
    src_ids = torch.randint(4, model.cfg.vocab_size, (2, 5))
    with _quiet(), torch.no_grad():
        enc_in, enc_out = names[contract.ENCODER]
        torch.onnx.export(EncoderGraph(model), (src_ids,), str(enc_path), input_names=list(enc_in),
                          output_names=list(enc_out), opset_version=opset, dynamo=True,
                          dynamic_shapes={contract.SRC_IDS: {0: batch, 1: src}}, optimize=True, verbose=False)
        inputs = example_inputs(model, b=9, s=5, p=4, sources=3)
        n = model.cfg.n_decoder_layers
        caches = (*[{0: sources, 3: src}] * n, *[{0: sources, 2: src}] * n, *[{0: batch, 3: past}] * n,
                  *[{0: batch, 2: past}] * n)  # keys (B, H, Dh, length), values (B, H, length, Dh)
        shapes = ({0: batch}, {0: batch}, {0: batch, 1: past}, {0: batch, 1: src}, caches)
        dec_in, dec_out = names[contract.DECODER]
        torch.onnx.export(DecoderStepGraph(model), tuple(inputs.values()), str(dec_path), input_names=list(dec_in),
                          output_names=list(dec_out), opset_version=opset, dynamo=True, dynamic_shapes=shapes,
                          optimize=True, verbose=False)
    _inline_external_data(enc_path)
    _inline_external_data(dec_path)
    return enc_path, dec_path


def _inline_external_data(path: Path) -> None:
    """Keep each graph one self-contained file (the exporter may split weights out)."""
    import onnx

    side = path.with_name(path.name + ".data")
    if side.exists():
        onnx.save_model(onnx.load(str(path)), str(path), save_as_external_data=False)
        side.unlink()


# (B, S, P, C) sizes other than the traced (9, 5, 4, 3): batch 1, an empty past, longer sources
# and pasts, one source per row (C = B: greedy rows) and one shared by a group of four (a beam).
CHECK_SIZES = ((1, 3, 0, 1), (3, 7, 6, 3), (4, 2, 0, 1), (1, 9, 3, 1), (8, 6, 5, 2))


def check_graphs(model: Transformer, enc_path: Path, dec_path: Path,
                 sizes: tuple[tuple[int, int, int, int], ...] = CHECK_SIZES) -> Worst:
    """The largest difference between PyTorch and onnxruntime (absolute and over each output's
    scale, export/parity.py) over sizes other than the traced one: batch 1, an empty past, longer
    sources and pasts; RuntimeError where a shape differs or the decoder picks another token."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    enc = ort.InferenceSession(str(enc_path), opts, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(dec_path), opts, providers=["CPUExecutionProvider"])
    worst = Worst()
    with torch.no_grad():
        for b, s, p, c in sizes:
            ids = torch.randint(4, model.cfg.vocab_size, (b, s))
            if b > 1:
                ids[-1, -1] = model.cfg.pad_id  # a padded source row
            ref = EncoderGraph(model)(ids)
            got = enc.run(None, {contract.SRC_IDS: ids.numpy()})
            for g, r in zip(got, ref):
                worst.add(g, r.numpy())
            inputs = example_inputs(model, b, s, p, seed=b * 1000 + s, sources=c)
            ref = DecoderStepGraph(model)(*inputs.values())
            got = dec.run(None, {k: v.numpy() for k, v in inputs.items()})
            for name, g, r in zip(contract.decoder_outputs(model.cfg.n_decoder_layers), got, ref):
                if g.shape != tuple(r.shape):
                    raise RuntimeError(f"{dec_path.name}: {name} has shape {g.shape}, PyTorch gives {tuple(r.shape)} "
                                       f"at B={b} S={s} P={p} C={c}")
                worst.add(g, r.numpy())
            if not same_choices(got[0], ref[0].numpy()):
                raise RuntimeError(f"{dec_path.name}: the chosen tokens differ from PyTorch at B={b} S={s} P={p} C={c}")
    return worst


def validate(path: Path, out_dir: Path, force: bool) -> tuple[list[str], dict[str, Any] | None]:
    """Every reason the export cannot proceed, collected before failing."""
    problems: list[str] = []
    ckpt = None
    try:
        ckpt = ckpt_io.load(ckpt_io.resolve(path))
    except (FileNotFoundError, ValueError) as e:
        problems.append(str(e))
    except Exception as e:  # torch.load of something else: a pickle, zip or format error
        problems.append(f"{path} is not a readable checkpoint ({type(e).__name__}: {str(e).strip().splitlines()[0]})")
    if out_dir.exists() and not out_dir.is_dir():
        problems.append(f"{out_dir} is a file; give a directory to write the package in")
    elif out_dir.exists() and any(out_dir.iterdir()) and not force:
        problems.append(f"{out_dir} exists and is not empty; pass --force to overwrite it")
    if ckpt is None:
        return problems, None
    if "tokenizer_model" not in ckpt:
        problems.append("the checkpoint holds no tokenizer (tokenizer_model)")
        return problems, ckpt
    try:
        cfg = RunConfig.from_dict(ckpt["config"])
        tok = Tokenizer(model_proto=ckpt["tokenizer_model"])
    except (ValueError, TypeError) as e:
        problems.append(str(e))
        return problems, ckpt
    if tok.vocab_size != cfg.model.vocab_size:
        problems.append(f"tokenizer has {tok.vocab_size} pieces but the model's vocabulary is {cfg.model.vocab_size}")
    for direction in cfg.data.directions:
        try:
            tok.tag_id(parse_direction(direction)[1])
        except (KeyError, ValueError) as e:
            problems.append(f"direction {direction}: {e}")
    return problems, ckpt


SHORTLIST_BESIDE = "shortlist.npz"  # a shipped model's vocabulary shortlist, next to its model.pt


def shortlist_beside(checkpoint: str | Path) -> Path | None:
    """The vocabulary shortlist shipped beside a checkpoint (``shortlist.npz``), if there is one."""
    found = ckpt_io.resolve(checkpoint).parent / SHORTLIST_BESIDE
    return found if found.is_file() else None


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path, int8: bool = False, fp16: bool = False,
                      force: bool = False, log=print, shortlist: str | Path | None = None) -> ModelPackage:
    """Run the whole pipeline and return the validated package; with ``shortlist`` (a file that
    engine/shortlist.py saved), the package scores that vocabulary shortlist on the CPU."""
    from engine.shortlist import Shortlist
    from export.shortlist_graph import add_to_package, shortlist_problem

    out_dir = Path(out_dir)
    path = ckpt_io.resolve(checkpoint)
    problems, ckpt = validate(path, out_dir, force)
    short = None
    if shortlist is not None:
        try:
            ckpt_io.verify_sha256(Path(shortlist))  # beside a shipped model: listed in its SHA256SUMS
            short = Shortlist.load(shortlist)
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"shortlist {shortlist}: {e}")
        if short is not None and ckpt is not None:  # checked before any work; add_to_package checks it again
            cfg = RunConfig.from_dict(ckpt["config"])
            targets = {parse_direction(p)[1] for p in cfg.data.directions}
            if problem := shortlist_problem(short, cfg.model.vocab_size, targets, "the model"):
                problems.append(f"shortlist {shortlist} {problem}")
    if problems:
        raise ValueError(f"cannot export {checkpoint}: " + "; ".join(problems))
    assert ckpt is not None
    model, cfg = ckpt_io.model_from(ckpt)  # validate() loaded (and checked) it: not read twice
    tokenizer = ckpt_io.load_tokenizer(ckpt)
    pairs = list(cfg.data.directions)
    targets = sorted({parse_direction(p)[1] for p in pairs})
    dev_bleu = next((h["dev_bleu"] for h in reversed(ckpt.get("history", [])) if "dev_bleu" in h), None)

    def manifest(worst: float) -> Manifest:
        return Manifest(
            dims=dimensions(cfg.model), special_ids=dict(SPECIAL_IDS),
            language_tags={lang: tokenizer.tag_id(lang) for lang in targets}, pairs=tuple(pairs),
            # Source: tag + pieces + eos must fit the positions; target: bos + pieces + eos.
            max_source_tokens=cfg.model.max_positions, max_target_tokens=cfg.model.max_positions - 1,
            graphs=(*contract.REQUIRED_GRAPHS, *contract.RESIDENT_GRAPHS),  # write_package writes all four
            # The checkpoint's sha256 tells whether a package is up to date (scripts/run.sh).
            provenance={"checkpoint": path.name, "checkpoint_sha256": ckpt_io.sha256_file(path),
                        "step": ckpt.get("step"), "averaged": ckpt.get("averaged"),
                        "dev_bleu": dev_bleu, "config": asdict(cfg), "opset": OPSET,
                        "torch": torch.__version__, "max_abs_diff_vs_torch": worst,
                        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    def finish(work: Path) -> None:
        if short is not None:
            add_to_package(work, short, {"file": Path(shortlist).name, "sha256": ckpt_io.sha256_file(Path(shortlist)),
                                         "languages": short.languages})

    return write_package(model, {contract.TOKENIZER: tokenizer.model_proto}, manifest, out_dir, int8=int8,
                         fp16=fp16, eos_id=EOS_ID, log=log, finish=finish)


def dimensions(m: ModelConfig) -> Dimensions:
    return Dimensions(d_model=m.d_model, n_heads=m.n_heads, d_head=m.d_model // m.n_heads,
                      n_encoder_layers=m.n_encoder_layers, n_decoder_layers=m.n_decoder_layers,
                      vocab_size=m.vocab_size, max_positions=m.max_positions)


def write_package(model: Transformer, files: dict[str, bytes], manifest: Callable[[float], Manifest],
                  out_dir: Path, int8: bool, fp16: bool, eos_id: int, log=print,
                  finish: Callable[[Path], None] | None = None) -> ModelPackage:
    """The pipeline every package goes through (a checkpoint of ours, an imported model): the
    four graphs, checked against PyTorch, their variants, the tokenizer ``files`` (name ->
    bytes) and the manifest, which ``manifest(max |diff| vs PyTorch)`` gives. Built in a
    temporary directory beside ``out_dir`` and moved in place at the end, so a failed export
    never leaves a half-written package behind; ``finish(directory)`` adds to it before the move."""
    from export import quantize, resident

    started = time.monotonic()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        log(f"[1/4] exporting encoder and decoder-step graphs (opset {OPSET}) ...")
        enc_path, dec_path = export_graphs(model, work)
        worst = check_graphs(model, enc_path, dec_path)
        step_path, rows_path = (work / contract.graph_file(g) for g in contract.RESIDENT_GRAPHS)
        with _quiet(), torch.no_grad():
            resident.export_resident_graphs(model.eval(), eos_id, step_path, rows_path, OPSET)
        _inline_external_data(step_path)
        _inline_external_data(rows_path)
        worst = worst.merge(resident.check_resident_graphs(model, step_path, rows_path, eos_id))
        log(f"[2/4] onnxruntime vs PyTorch at untraced sizes: max |diff| {worst.absolute:.2e}, "
            f"{worst.relative:.2e} of the outputs' scale")
        worst.refuse_if_apart()  # judged on each output's scale: float32 rounding grows with the values
        log(f"[3/4] variants: {', '.join(v for v, on in (('int8', int8), ('fp16', fp16)) if on) or 'none asked'}")
        for graph_path in (enc_path, dec_path, step_path, rows_path):
            with _quiet():
                # int8 is for the CPU, whose decoding loop runs on the plain decoder graph.
                if int8 and graph_path not in (step_path, rows_path):  # both widths: engine/cpu.py picks
                    quantize.to_int8(graph_path, work / graph_path.name.replace(".onnx", ".int8.onnx"))
                    quantize.to_int8(graph_path, work / graph_path.name.replace(".onnx", ".int8w8.onnx"),
                                     quantize.WEIGHT_MAX_EXACT)
                if fp16:
                    quantize.to_fp16(graph_path, work / graph_path.name.replace(".onnx", ".fp16.onnx"))
        for name, content in files.items():
            (work / name).write_bytes(content)
        write_manifest(work, manifest(worst.absolute))
        if finish is not None:
            finish(work)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        work.rename(out_dir)
        out_dir.chmod(0o755)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    package = ModelPackage.load(out_dir)
    size = sum(f.stat().st_size for f in out_dir.iterdir()) / 1e6
    log(f"[4/4] wrote {out_dir} ({', '.join(package.variants)}; {size:.1f} MB) in {time.monotonic() - started:.0f}s")
    return package


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="nmt-export", description=__doc__, epilog=exit_status_help(EXIT_FAILED, EXIT_USAGE))
    p.add_argument("checkpoint", help="a checkpoint (.pt), a shipped model's directory (its model.pt) or a run "
                                      "directory of nmt-train (its average.pt or last checkpoint)")
    p.add_argument("out_dir", help="the model package directory to write (created with its parents)")
    p.add_argument("--int8", action="store_true", help="add int8 graphs (dynamic quantization) for the CPU, "
                   "with 7-bit weights (any x86 CPU) and 8-bit weights (int8w8: CPUs with VNNI or AMX)")
    p.add_argument("--fp16", action="store_true", help="add half-precision graphs for CUDA")
    p.add_argument("--force", action="store_true", help="overwrite an existing, non-empty out_dir")
    sl = p.add_mutually_exclusive_group()
    sl.add_argument("--shortlist", type=Path, help="add this vocabulary shortlist (python -m export.shortlist_graph "
                    f"--save makes one; default: the {SHORTLIST_BESIDE} beside the checkpoint, when there is one)")
    sl.add_argument("--no-shortlist", action="store_true", help=f"ignore a {SHORTLIST_BESIDE} beside the checkpoint")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        shortlist = None if args.no_shortlist else args.shortlist or shortlist_beside(args.checkpoint)
        export_checkpoint(args.checkpoint, args.out_dir, int8=args.int8, fp16=args.fp16, force=args.force,
                          shortlist=shortlist)
    except (ValueError, FileNotFoundError) as e:  # what the user gave: collected and named before any work
        return fail("nmt-export", str(e), EXIT_USAGE)
    except RuntimeError as e:  # the exported graphs do not match PyTorch
        return fail("nmt-export", str(e), EXIT_FAILED)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
