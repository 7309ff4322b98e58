"""The decoder step over a vocabulary shortlist: two graphs made from a step graph (fp32 or int8)
so that a step scores only the target pieces it is given.

shortlist_table: vocab_ids int64[V'] (the pieces a batch may produce, sorted; engine/shortlist.py)
    -> vocab_weight [D,V'] (the output projection's columns: float32, or int8 for the int8 graph),
       vocab_scale float[V'] (int8: the columns' scales; fp32: ones), vocab_bias float[V'] (the
       output bias's entries; zeros without one). Run when the batch's pieces change, not per step:
       gathering the int8 table's 2,000-odd columns (and turning them (D,V')) cost 0.17 of a
       1.1 ms step at 4 rows when the step graph did it every time.
shortlist: the decoder step's inputs + vocab_weight, vocab_scale, vocab_bias and
    vocab_mask bool[B,V'] (which pieces each row may produce: its own job's) -> log_probs [B,V']
    (column j: piece vocab_ids[j]), the rest as the decoder step. The output projection is the
    product with vocab_weight, so V'/V of the full one; a row is normalised over its own pieces
    only (the others are -inf), so a text decoded alone and in a batch (the union) is scored alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from cli import EXIT_OK, EXIT_USAGE, ArgumentParser, fail
from engine import contract
from engine.package import ModelPackage, write_manifest
from engine.shortlist import FREQUENT, PER_SOURCE, Shortlist, learn

SHORTLIST_VARIANTS = ("fp32", "int8", "int8w8")  # the CPU's: the fp16 (CUDA) path decodes device-resident


def shortlist_graphs(src: Path, table_dst: Path, step_dst: Path) -> tuple[Path, Path]:
    """Write the shortlist table and step graphs of the decoder step graph ``src``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    [softmax] = [n for n in graph.node if n.op_type == "LogSoftmax" and n.output[0] == contract.LOG_PROBS]
    node = producer[softmax.input[0]]
    bias = bias_add = None
    if node.op_type == "Add" and node.input[1] in inits and len(inits[node.input[1]].dims) == 1:
        bias, bias_add = numpy_helper.to_array(inits[node.input[1]]), node  # an output bias (V,): now vocab_bias
        node = producer[node.input[0]]
    if node.op_type not in ("MatMul", "MatMulIntegerToFloat") or node.input[1] not in inits:
        raise ValueError(f"{src}: the log-probabilities are not computed from a constant output projection "
                         f"({node.op_type} {list(node.input)})")
    weight = numpy_helper.to_array(inits[node.input[1]])  # (D, V)
    vocab = weight.shape[1]
    int8 = node.op_type == "MatMulIntegerToFloat"
    scale = numpy_helper.to_array(inits[node.input[3]]) if int8 else np.ones(vocab, np.float32)
    bias = np.zeros(vocab, np.float32) if bias is None else bias.astype(np.float32)

    # The table graph: rows of (V, D) tables, gathered whole (a gather along the last axis of the
    # int8 (384, 8000) weight took 5.6 ms), then turned back to (D, V').
    tables = [numpy_helper.from_array(np.ascontiguousarray(weight.T), "table.weight_by_piece"),
              numpy_helper.from_array(scale.astype(np.float32), "table.scale"),
              numpy_helper.from_array(bias, "table.bias")]
    table_nodes = [
        helper.make_node("Gather", ["table.weight_by_piece", contract.VOCAB_IDS], ["table.rows"], axis=0),
        helper.make_node("Transpose", ["table.rows"], [contract.VOCAB_WEIGHT], perm=[1, 0]),
        helper.make_node("Gather", ["table.scale", contract.VOCAB_IDS], [contract.VOCAB_SCALE], axis=0),
        helper.make_node("Gather", ["table.bias", contract.VOCAB_IDS], [contract.VOCAB_BIAS], axis=0)]
    weight_type = TensorProto.INT8 if weight.dtype == np.int8 else TensorProto.UINT8 if weight.dtype == np.uint8 \
        else TensorProto.FLOAT
    table_io = [helper.make_tensor_value_info(contract.VOCAB_WEIGHT, weight_type, [weight.shape[0], "vocab"]),
                helper.make_tensor_value_info(contract.VOCAB_SCALE, TensorProto.FLOAT, ["vocab"]),
                helper.make_tensor_value_info(contract.VOCAB_BIAS, TensorProto.FLOAT, ["vocab"])]
    table = helper.make_graph(table_nodes, "shortlist_table",
                              [helper.make_tensor_value_info(contract.VOCAB_IDS, TensorProto.INT64, ["vocab"])],
                              table_io, initializer=tables)
    table_model = helper.make_model(table, opset_imports=[o for o in model.opset_import if o.domain in ("", "ai.onnx")])
    table_model.ir_version = model.ir_version
    onnx.checker.check_model(table_model)
    onnx.save_model(table_model, str(table_dst))

    # The step graph: the product with the given columns, scaled (int8: by the product itself),
    # plus the bias, masked per row, normalised.
    node.input[1] = contract.VOCAB_WEIGHT
    scaled = node.output[0]
    if int8:
        node.input[3] = contract.VOCAB_SCALE  # the product applies the scales itself
        tail = []
    else:
        tail = [helper.make_node("Mul", [scaled, contract.VOCAB_SCALE], ["shortlist.scaled"])]
        scaled = "shortlist.scaled"
    graph.initializer.append(numpy_helper.from_array(np.array(-np.inf, np.float32), "shortlist.minus_inf"))
    tail += [helper.make_node("Add", [scaled, contract.VOCAB_BIAS], ["shortlist.logits"]),
             helper.make_node("Where", [contract.VOCAB_MASK, "shortlist.logits", "shortlist.minus_inf"],
                              ["shortlist.masked"]),
             helper.make_node("LogSoftmax", ["shortlist.masked"], [contract.LOG_PROBS], axis=-1)]
    nodes = [n for n in graph.node if n is not softmax and n is not bias_add]
    del graph.node[:]
    graph.node.extend(nodes + tail)
    read = {i for n in graph.node for i in n.input}
    for init in [i for i in graph.initializer if i.name not in read]:  # the (D, V) table: in the table graph
        graph.initializer.remove(init)
    graph.input.extend([*table_io,
                        helper.make_tensor_value_info(contract.VOCAB_MASK, TensorProto.BOOL, ["batch", "vocab"])])
    for out in graph.output:
        if out.name == contract.LOG_PROBS:
            out.type.tensor_type.shape.dim[1].dim_param = "vocab"
    del graph.value_info[:]
    onnx.checker.check_model(model)
    onnx.save_model(model, str(step_dst))
    return table_dst, step_dst


def training_examples(checkpoint: str | Path, max_pairs: int = 0) -> tuple[list[tuple[list[int], list[int], str]], int]:
    """(source ids, target ids, target language) of a checkpoint's training pairs, tokenized as in
    training (its config names the sources), and the vocabulary size."""
    from training import checkpoint as ckpt_io
    from training.config import RunConfig
    from training.data import encode_pairs, load_pairs

    ckpt = ckpt_io.load(ckpt_io.resolve(checkpoint))
    cfg = RunConfig.from_dict(ckpt["config"])
    tok = ckpt_io.load_tokenizer(ckpt)
    pairs = load_pairs(cfg.data, "train")
    if max_pairs and len(pairs) > max_pairs:
        keep = np.random.default_rng(1).choice(len(pairs), max_pairs, replace=False)
        pairs = [pairs[i] for i in sorted(keep)]
    examples = encode_pairs(pairs, tok, cfg.data.max_tokens_per_sentence, protect=cfg.data.placeholders)
    tag_to_lang = {tok.tag_id(lang): lang for lang in {p.tgt_lang for p in pairs}}
    return [(e.src, e.tgt, tag_to_lang[e.src[0]]) for e in examples], tok.vocab_size


def shortlist_problem(shortlist: Shortlist, vocab_size: int, targets: Iterable[str], holder: str) -> str:
    """Why ``shortlist`` cannot serve a model of ``vocab_size`` pieces translating into ``targets``
    (``holder`` names that model in the message), or '' when it can."""
    if shortlist.vocab_size != vocab_size:
        return f"is for a vocabulary of {shortlist.vocab_size}; {holder} has {vocab_size}"
    missing = sorted(set(targets) - set(shortlist.languages))
    return f"has no list for target language(s) {', '.join(missing)}" if missing else ""


def add_to_package(package_dir: str | Path, shortlist: Shortlist, about: dict) -> ModelPackage:
    """Write the shortlist and the shortlist step graph of each CPU variant into a package, and its
    manifest again (``about``, how the shortlist was made, goes into its provenance)."""
    package = ModelPackage.load(package_dir)
    problem = shortlist_problem(shortlist, package.dims.vocab_size, package.language_tags, "the package")
    if problem:
        raise ValueError(f"the shortlist {problem}")
    shortlist.save(package.path / contract.SHORTLIST_FILE)
    for variant in SHORTLIST_VARIANTS:
        if variant in package.variants:
            shortlist_graphs(package.graph_path(contract.DECODER, variant),
                             *(package.path / contract.graph_file(g, variant) for g in contract.SHORTLIST_GRAPHS))
    manifest = dataclasses.replace(package.manifest,
                                   graphs=tuple(dict.fromkeys((*package.graphs, *contract.SHORTLIST_GRAPHS))),
                                   provenance={**package.provenance, "shortlist": about})
    write_manifest(package.path, manifest)
    return ModelPackage.load(package.path)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m export.shortlist_graph",
                       description="Learn a vocabulary shortlist from a checkpoint's training data (or read "
                                   "one) and add it to the model package exported from it: the engine then "
                                   "scores only the pieces a batch may need (engine/shortlist.py).")
    p.add_argument("package", help="the model package directory (nmt-export's)")
    p.add_argument("--checkpoint", help="learn from this checkpoint's training data (its config's sources)")
    p.add_argument("--shortlist", help="a shortlist.npz learned before (instead of --checkpoint)")
    p.add_argument("--save", help="also write the learned shortlist here (e.g. beside the checkpoint)")
    p.add_argument("--frequent", type=int, default=FREQUENT, help="target pieces always allowed (default: %(default)s)")
    p.add_argument("--per-source", type=int, default=PER_SOURCE,
                   help="target pieces allowed per source piece (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if bool(args.checkpoint) == bool(args.shortlist):
        return fail("shortlist", "give --checkpoint (learn) or --shortlist (a file), one of them", EXIT_USAGE)
    started = time.monotonic()
    if args.shortlist:
        shortlist = Shortlist.load(args.shortlist)
        about = {"file": Path(args.shortlist).name}
    else:
        examples, vocab = training_examples(args.checkpoint)
        shortlist = learn(examples, vocab, frequent=args.frequent, per_source=args.per_source)
        about = {"frequent": args.frequent, "per_source": args.per_source, "examples": len(examples),
                 "checkpoint": Path(args.checkpoint).name}
        if args.save:
            shortlist.save(args.save)
    try:
        package = add_to_package(args.package, shortlist, about)
    except ValueError as e:
        return fail("shortlist", str(e), EXIT_USAGE)
    print(f"{package.path}: shortlist for {', '.join(shortlist.languages)} added to the "
          f"{', '.join(package.shortlist_variants)} graphs in {time.monotonic() - started:.0f}s")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
