"""Walks over ONNX protos: every graph of a model (If/Loop/Scan bodies included) and every
tensor stored in them."""

from __future__ import annotations

import onnx


def graphs_everywhere(graph: onnx.GraphProto):
    """`graph` and every subgraph in it (If/Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graphs_everywhere(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from graphs_everywhere(g)


def all_tensor_protos(graph: onnx.GraphProto):
    """Initializers and tensor attributes (Constant nodes), in every scope."""
    for g in graphs_everywhere(graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from attr.tensors
