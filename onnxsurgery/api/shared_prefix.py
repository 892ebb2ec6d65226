"""Two candidate files that differ in a few weights (api/measured_or_free.py) share the part of
the graph that does not reach those weights: that prefix computes the same values in both. The
first candidate runs whole, asked also for the values where the second one's differing part
begins (the cut); the second runs only its differing part (the suffix), fed those values.

`Suffix.of` finds the suffix: a node of the second file whose proto differs from the first's
node of the same outputs, or that reads an initializer whose bytes differ, or that reads a value
such a node computes. The suffix's nodes are the second file's own, with its initializers; only
the values at the cut come in as inputs instead of being computed by the same nodes of the other
file. A model whose nodes hold subgraphs (If/Loop/Scan, which read outer values by name) is not
cut (None), nor one whose suffix is most of the graph (no saving worth a second session's build).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

# Cut only where the suffix has at most this share of the second file's nodes
MOST_OF_THE_GRAPH = 0.75


@dataclass
class Suffix:
    model: onnx.ModelProto
    first: onnx.ModelProto  # the first candidate's file, as read
    cut: list[str]  # values the first candidate's run hands over, graph inputs included
    outputs: list[str]  # the graph outputs the suffix computes; the others are the first run's

    @staticmethod
    def of(first: Path, second: Path) -> Suffix | None:
        a, b = onnx.load(str(first)), onnx.load(str(second))
        if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for m in (a, b) for n in m.graph.node for attr in n.attribute):
            return None
        theirs = {tuple(n.output): n.SerializeToString() for n in a.graph.node}
        a_init = {t.name: t.SerializeToString() for t in a.graph.initializer}
        b_init = {t.name: t for t in b.graph.initializer}
        changed = {name for name, t in b_init.items() if a_init.get(name) != t.SerializeToString()}
        tainted: set[str] = set()
        chosen = []
        for index, n in enumerate(b.graph.node):
            if (theirs.get(tuple(n.output)) != n.SerializeToString()
                    or any(i in changed or i in tainted for i in n.input)):
                chosen.append(index)
                tainted.update(o for o in n.output if o)
        if not chosen or len(chosen) > MOST_OF_THE_GRAPH * len(b.graph.node):
            return None
        # the constant chains the suffix reads (a later weight's lowering) go with it: asked of the
        # first run as outputs, they would change how its session treats them (a DequantizeLinear
        # then computed apart from its reader)
        constant, producer = set(b_init), {}
        for index, n in enumerate(b.graph.node):
            if all(i in constant for i in n.input if i):
                constant.update(o for o in n.output if o)
                producer.update({o: index for o in n.output if o})
        needed = [i for k in chosen for i in b.graph.node[k].input if i in producer]
        chosen_set = set(chosen)
        while needed:
            index = producer[needed.pop()]
            if index not in chosen_set:
                chosen_set.add(index)
                needed.extend(i for i in b.graph.node[index].input if i in producer)
        nodes = [b.graph.node[k] for k in sorted(chosen_set)]
        made = {o for n in nodes for o in n.output if o}
        read = {i for n in nodes for i in n.input if i}
        cut = sorted(read - made - set(b_init))
        outputs = [o for o in b.graph.output if o.name in tainted]
        graph = helper.make_graph(nodes, "suffix", [], outputs,
                                  initializer=[b_init[name] for name in sorted(read & set(b_init))])
        model = helper.make_model(graph, opset_imports=b.opset_import, ir_version=b.ir_version)
        return Suffix(model, a, cut, [o.name for o in outputs])

    def asking(self, names: list[str]) -> onnx.ModelProto:
        """The first candidate with `names` (values it computes) as outputs too."""
        self.first.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in names)
        return self.first

    def typed(self, values: dict[str, np.ndarray]) -> onnx.ModelProto:
        """The suffix with its inputs typed as the values handed over are."""
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        model.graph.input.extend(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(values[name].dtype), None) for name in self.cut)
        return model
