"""A budget that affords one of two weights of the same size whose measured ratios nearly tie takes
the same one whatever the weights' last bits (issue 55: PP-OCRv6 rec's conv2d_95 and conv2d_103,
1.6767 and 1.6740 as shipped, the other way round in bfloat16)."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsurgery.quantization.choices.measures import TIE_MARGIN, ranked


@dataclass
class Cost:
    name: str
    ratio: float
    extra: int


def names(costs: list[Cost]) -> list[str]:
    return [c.name for c in ranked(costs, key=lambda c: c.ratio, twin=lambda c: c.extra)]


def test_a_near_tie_of_the_same_size_keeps_the_graph_order():
    shipped = [Cost("a", 2.0, 10), Cost("conv95", 1.6767, 8), Cost("conv103", 1.6740, 8), Cost("b", 1.6646, 8)]
    bf16 = [Cost("a", 2.0, 10), Cost("conv95", 1.6742, 8), Cost("conv103", 1.6759, 8), Cost("b", 1.6646, 8)]
    assert names(shipped) == names(bf16) == ["a", "conv95", "conv103", "b"]


def test_other_sizes_and_clear_gaps_keep_the_ratio_order():
    # a later weight of another shape, or one more than TIE_MARGIN ahead, stays ahead
    gap = 1 + 3 * TIE_MARGIN
    assert names([Cost("x", 1.0, 8), Cost("y", 1.001, 4)]) == ["y", "x"]
    assert names([Cost("x", 1.0, 8), Cost("y", gap, 8)]) == ["y", "x"]
    assert names([Cost("x", 1.0, 8), Cost("y", 1.001, 8)]) == ["x", "y"]
