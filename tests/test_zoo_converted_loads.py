"""A converted zoo variant (fp16, bf16, opset 21) is loaded in a child process (zoo/variants.py,
`_loads`): onnxruntime 1.32 segfaults creating a session of lac_chinese's float16 variant, which
ended the whole zoo run when the zoo loaded it in its own process. A variant that fails there is
skipped with the reason, its file removed; one that loads stays."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import variants  # noqa: E402


def _matmul(dtype=np.float32) -> onnx.ModelProto:
    """x (float32) @ w: onnxruntime refuses it where w is float16 (MatMul's types differ)."""
    w = numpy_helper.from_array(np.eye(4, dtype=dtype), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_converted_variant_that_loads_stays(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_matmul(), str(path))
    variants._loads(path, converted=True)
    assert path.exists()


def test_a_converted_variant_that_fails_in_the_child_is_skipped_and_removed(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_matmul(np.float16), str(path))
    with pytest.raises(variants.Skip, match="does not load in onnxruntime"):
        variants._loads(path, converted=True)
    assert not path.exists()
