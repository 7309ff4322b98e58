"""The decoder step over a vocabulary shortlist: a copy of a step graph (fp32 or int8) that scores
only the target pieces it is given.

Two inputs are added to the decoder step's (engine/contract.py):
  vocab_ids  int64[V']  the pieces this batch may produce (engine/shortlist.py), sorted
  vocab_mask bool[B,V'] which of them each row may produce (its own job's shortlist)
and log_probs becomes float[B,V']: column j is piece vocab_ids[j]. The output projection's
weight columns (and, int8, their scales; a bias, if any) are gathered by vocab_ids, so the
product is V'/V of the full one; a row's log-probabilities are normalised over its own pieces
only (the others are -inf), in float64, so that a text decoded alone (its own shortlist) and in
a batch (the union) gets the same numbers: the normaliser's sum runs over the same terms either
way, and float64 leaves the float32 result the same whatever order the kernel adds them in.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

from cli import EXIT_OK, EXIT_USAGE, ArgumentParser, fail
from engine import contract
from engine.package import ModelPackage, write_manifest
from engine.shortlist import FREQUENT, PER_SOURCE, Shortlist, learn

SHORTLIST_VARIANTS = ("fp32", "int8")  # the CPU's: the fp16 (CUDA) path decodes device-resident


def shortlist_graph(src: Path, dst: Path) -> Path:
    """Write the shortlist step graph of the decoder step graph ``src`` to ``dst``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    [softmax] = [n for n in graph.node if n.op_type == "LogSoftmax" and n.output[0] == contract.LOG_PROBS]
    new_nodes = []

    def gather(name: str) -> str:
        """Gather the shortlist's entries of a (V,) vector or the columns of a (D, V) matrix. The
        matrix is stored transposed, (V, D), so the gather copies whole rows (a gather along the
        last axis of the int8 (384, 8000) weight took 5.6 ms a step), then turned back."""
        out = f"{name}.shortlisted"
        table = inits[name]
        if len(table.dims) == 2:
            transposed = numpy_helper.from_array(numpy_helper.to_array(table).T.copy(), f"{name}.by_piece")
            graph.initializer.append(transposed)
            new_nodes.append(helper.make_node("Gather", [transposed.name, contract.VOCAB_IDS], [f"{out}.rows"],
                                              axis=0, name=f"{out}.rows"))
            new_nodes.append(helper.make_node("Transpose", [f"{out}.rows"], [out], perm=[1, 0], name=out))
        else:
            new_nodes.append(helper.make_node("Gather", [name, contract.VOCAB_IDS], [out], axis=0, name=out))
        return out

    logits = softmax.input[0]
    node = producer[logits]
    if node.op_type == "Add" and node.input[1] in inits and len(inits[node.input[1]].dims) == 1:
        node.input[1] = gather(node.input[1])  # an output bias (V,)
        node = producer[node.input[0]]
    if node.op_type == "MatMul" and node.input[1] in inits:
        node.input[1] = gather(node.input[1])  # the weight, stored (D, V)
    elif node.op_type == "MatMulIntegerToFloat" and node.input[1] in inits:
        node.input[1] = gather(node.input[1])  # int8 weight (D, V)
        node.input[3] = gather(node.input[3])  # its scale per column (V,)
    else:
        raise ValueError(f"{src}: the log-probabilities are not computed from a constant output projection "
                         f"({node.op_type} {list(node.input)})")
    graph.initializer.append(numpy_helper.from_array(np.array(-np.inf, np.float32), "shortlist.minus_inf"))
    new_nodes += [
        helper.make_node("Where", [contract.VOCAB_MASK, logits, "shortlist.minus_inf"], ["shortlist.masked"]),
        helper.make_node("LogSoftmax", ["shortlist.masked"], [contract.LOG_PROBS], axis=-1),
    ]
    nodes = [n for n in graph.node if n is not softmax]
    at = next(i for i, n in enumerate(nodes) if n is node)  # the gathers run before the product
    gathers, tail = new_nodes[:-2], new_nodes[-2:]
    del graph.node[:]
    graph.node.extend(nodes[:at] + gathers + nodes[at:] + tail)
    read = {i for n in graph.node for i in n.input}
    unused = [i for i in graph.initializer if i.name not in read]  # the (D, V) tables now read transposed
    for init in unused:
        graph.initializer.remove(init)
    graph.input.extend([helper.make_tensor_value_info(contract.VOCAB_IDS, TensorProto.INT64, ["vocab"]),
                        helper.make_tensor_value_info(contract.VOCAB_MASK, TensorProto.BOOL, ["batch", "vocab"])])
    for out in graph.output:
        if out.name == contract.LOG_PROBS:
            out.type.tensor_type.shape.dim[1].dim_param = "vocab"
    del graph.value_info[:]
    onnx.checker.check_model(model)
    onnx.save_model(model, str(dst))
    return dst


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


def add_to_package(package_dir: str | Path, shortlist: Shortlist, about: dict) -> ModelPackage:
    """Write the shortlist and the shortlist step graph of each CPU variant into a package, and its
    manifest again (``about``, how the shortlist was made, goes into its provenance)."""
    package = ModelPackage.load(package_dir)
    if shortlist.vocab_size != package.dims.vocab_size:
        raise ValueError(f"the shortlist is for a vocabulary of {shortlist.vocab_size}; the package has "
                         f"{package.dims.vocab_size}")
    missing = sorted(set(package.language_tags) - set(shortlist.languages))
    if missing:
        raise ValueError(f"the shortlist has no list for target language(s) {', '.join(missing)}")
    shortlist.save(package.path / contract.SHORTLIST_FILE)
    for variant in SHORTLIST_VARIANTS:
        if variant in package.variants:
            shortlist_graph(package.graph_path(contract.DECODER, variant),
                            package.path / contract.graph_file(contract.SHORTLIST, variant))
    manifest = dataclasses.replace(package.manifest, graphs=tuple(dict.fromkeys((*package.graphs, contract.SHORTLIST))),
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
