"""One matrix product where the exported graph has several over the same input.

The exporter writes each linear layer as its own MatMul (+ bias Add): the query, key and
value projections of one attention block read the same activations in three products, and
the encoder's cross-attention keys and values for every decoder layer read its output in
2 x layers products. ``fuse_shared_products`` puts the weights of such products side by side
(D, N1 + N2 + ...) and the biases likewise, so the graph runs one product, one Add and one
Split where it ran three (or four) of each: fewer kernel calls per step (what a decoder step
at one to a few rows costs most), wider products (better use of the matrix kernels), and in
the int8 graphs one product where several shared an input's quantization already.

The values are those of the separate products: each output column is the same dot product
over the same input row, and ``export/quantize.py`` scales each weight column on its own,
so the int8 columns are the same integers and scales as before. The package's contract
(engine/contract.py) does not change: the graph's inputs and outputs keep their names.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def fuse_shared_products(model) -> int:
    """Fuse, in place, every group of two or more MatMuls of ``model`` (an onnx ModelProto)
    that read the same input with constant 2-D float weights of the same input width, each
    followed by exactly one bias Add of a constant 1-D vector (or none of them by an Add).
    Returns the number of groups fused."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consumers: dict[str, list] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    outputs = {o.name for o in graph.output}

    def constant_weight(node) -> np.ndarray | None:
        w = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if w is None or len(w.dims) != 2 or w.data_type != TensorProto.FLOAT:
            return None
        return numpy_helper.to_array(w)

    def bias_of(node) -> tuple[object, np.ndarray] | None:
        """The Add that is the product's only reader, and its constant 1-D bias."""
        readers = consumers[node.output[0]]
        if len(readers) != 1 or node.output[0] in outputs or readers[0].op_type != "Add":
            return None
        add = readers[0]
        other = add.input[1] if add.input[0] == node.output[0] else add.input[0]
        b = inits.get(other)
        if b is None or len(b.dims) != 1 or b.data_type != TensorProto.FLOAT:
            return None
        return add, numpy_helper.to_array(b)

    groups: dict[tuple[str, int], list] = defaultdict(list)
    for node in graph.node:
        w = constant_weight(node)
        if w is not None:
            groups[node.input[0], w.shape[0]].append(node)

    fused = 0
    removed: set[int] = set()
    position = {id(n): i for i, n in enumerate(graph.node)}
    insert_at: dict[int, list] = {}  # id(first node replaced) -> the nodes that take the group's place
    new_inits = []
    for (x, _), nodes in groups.items():
        if len(nodes) < 2:
            continue
        biases = [bias_of(n) for n in nodes]
        with_bias = all(b is not None for b in biases)
        if not with_bias and any(b is not None for b in biases):
            continue
        weights = [constant_weight(n) for n in nodes]
        widths = [w.shape[1] for w in weights]
        if with_bias and any(b[1].shape[0] != width for b, width in zip(biases, widths)):
            continue
        name = f"fused.{nodes[0].name or nodes[0].output[0]}"
        new_inits += [numpy_helper.from_array(np.concatenate(weights, axis=1), f"{name}.weight"),
                      numpy_helper.from_array(np.array(widths, dtype=np.int64), f"{name}.widths")]
        product = f"{name}.product"
        replacement = [helper.make_node("MatMul", [x, f"{name}.weight"], [product], name=f"{name}.MatMul")]
        if with_bias:
            new_inits.append(numpy_helper.from_array(np.concatenate([b[1] for b in biases]), f"{name}.bias"))
            replacement.append(helper.make_node("Add", [product, f"{name}.bias"], [f"{name}.sum"], name=f"{name}.Add"))
            product = f"{name}.sum"
        ends = [b[0].output[0] for b in biases] if with_bias else [n.output[0] for n in nodes]
        replacement.append(helper.make_node("Split", [product, f"{name}.widths"], ends, name=f"{name}.Split", axis=-1))
        replaced = [*nodes, *(b[0] for b in biases)] if with_bias else nodes
        removed.update(id(n) for n in replaced)
        # Where the group's first product was: its input is ready there, its weights are constants.
        insert_at[id(min(replaced, key=lambda n: position[id(n)]))] = replacement
        fused += 1
    if not fused:
        return 0
    order = []
    for node in graph.node:
        if id(node) in insert_at:
            order += insert_at[id(node)]
        if id(node) not in removed:
            order.append(node)
    used = {name for node in order for name in node.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.node[:]
    graph.node.extend(order)
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    del graph.value_info[:]  # shapes of removed tensors; onnx infers what it needs again
    return fused

