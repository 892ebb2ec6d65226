"""Facts about the whole model that per-weight rules ask (a KV cache, com.microsoft ops already,
the convolutions' share of the weights, TensorRT's float16 choice), computed once per planning
run rather than once per weight: scanning every node for each of a decoder's 211 weights took
1.7 s of a 5.6 s plan.

Each planning run (planning.py) makes its own, which the planner and every question asked of
it (the required opset, whether any weight changes, the quantize pass's estimate) share, and
hands it to the stages that ask; a graph rewritten since is asked again by the next run, and a
graph the run has let go of is freed with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import onnx_graphsurgeon as gs

from ...running.kv_cache import has_kv_cache

T = TypeVar("T")


class ModelFacts:
    """The facts of `graph` (the model's main graph), each computed on first use."""

    def __init__(self, graph: gs.Graph):
        self.graph = graph
        self._known: dict[str, object] = {}

    def get(self, fact: str, compute: Callable[[gs.Graph], T]) -> T:
        """compute(the main graph), once per fact (`fact` names it, with what it depends on)."""
        if fact not in self._known:
            self._known[fact] = compute(self.graph)
        return self._known[fact]

    @property
    def kv_cache(self) -> bool:
        """A decoder fed its own past (kv_cache.has_kv_cache)."""
        return self.get("kv_cache", has_kv_cache)
