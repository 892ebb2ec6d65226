"""bench/fresh_swaps.py's changes to a plan: a part of a name or ^ one name exactly, a form as
JSON, FLOAT, or shrink-ray's form along the axis read from its file (float where it left the
weight alone); a pattern that matches nothing is refused, not ignored."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fresh_swaps  # noqa: E402

PLAN = [{"name": n, "dtype": "int8", "granularity": "channel", "axis": 1, "symmetric": False, "lowering": "scaled",
         "block_size": None, "rounding": "nearest", "levels": None} for n in ("coefficient", "coefficient1")]


def test_exact_name_and_part_of_names():
    one = fresh_swaps.changed(PLAN, '^coefficient={"symmetric": true}', {})
    assert [w["symmetric"] for w in one] == [True, False]
    both = fresh_swaps.changed(PLAN, "coefficient=FLOAT", {})
    assert [w["dtype"] for w in both] == ["float", "float"]
    assert PLAN[0]["dtype"] == "int8"  # the base plan is left as it was


def test_shrink_ray_form_where_it_quantized_float_where_it_did_not():
    out = fresh_swaps.changed(PLAN, "coefficient=SR", {"coefficient": 0})
    assert (out[0]["lowering"], out[0]["axis"], out[0]["symmetric"]) == ("dq", 0, False)
    assert out[1]["dtype"] == "float"


def test_a_pattern_matching_nothing_is_refused():
    with pytest.raises(SystemExit, match="no weight matches"):
        fresh_swaps.changed(PLAN, "conv=FLOAT", {})


def test_constant_node_weights_found_by_either_name():
    """A Constant node's weight: `<node>_output_0` in our plan, `<node>` in shrink-ray's file. SR
    read it as float before (the axis looked up under our name), and ^<node> matched nothing."""
    plan = [dict(PLAN[0], name="gru.weight_ih_output_0"), dict(PLAN[1], name="fc")]
    out = fresh_swaps.changed(plan, "gru=SR", {"gru.weight_ih": 1})
    assert (out[0]["dtype"], out[0]["lowering"], out[0]["axis"]) == ("int8", "dq", 1)
    exact = fresh_swaps.changed(plan, "^gru.weight_ih=FLOAT", {})
    assert [w["dtype"] for w in exact] == ["float", "int8"]
    assert fresh_swaps.changed(plan, "^gru.weight_ih_output_0=FLOAT", {})[0]["dtype"] == "float"
