"""A sparse initializer is stored as its values and their indices: `info` counts those bytes, says it is
sparse, and no method is said to save bytes of its dense shape, which the file does not hold; narrowing
leaves it sparse (written back dense it would grow)."""

from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.cli import main

N = 64


def _sparse_matmul(path):
    """x [1, 64] -> MatMul W (64 x 64, 3 values stored sparse) -> y."""
    values = numpy_helper.from_array(np.arange(1, 4, dtype=np.float32), "W")
    indices = numpy_helper.from_array(np.array([0, 5, N * N - 1], np.int64), "W_i")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])],
                              sparse_initializer=[helper.make_sparse_tensor(values, indices, [N, N])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_info_counts_a_sparse_initializers_stored_bytes(tmp_path):
    src = tmp_path / "m.onnx"
    _sparse_matmul(src)
    found = onnxsurgery.info(src, min_bytes=1)
    stored = 3 * 4 + 3 * 8  # float32 values and int64 indices, not 64 x 64 x 4 = 16 KB
    (w,) = found["large_constants"]
    assert (w["name"], w["bytes"], w["sparse"], w["shape"]) == ("W", stored, True, [N, N])
    assert found["weight_bytes"] == stored <= found["model_bytes"]
    assert found["bytes_by_dtype"] == {"float": stored}
    assert all(0 <= saved <= stored for saved in found["savings"].values())
    printed = CliRunner().invoke(main, ["info", str(src), "--min-bytes", "1"])
    assert printed.exit_code == 0, printed.output
    assert "sparse" in printed.output and "16.4 KB" not in printed.output


def test_narrow_leaves_a_sparse_int64_constant_sparse(tmp_path):
    values = numpy_helper.from_array(np.array([3], np.int64), "idx")
    indices = numpy_helper.from_array(np.array([1], np.int64), "idx_i")
    graph = helper.make_graph([helper.make_node("Gather", ["x", "idx"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
                              sparse_initializer=[helper.make_sparse_tensor(values, indices, [64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out, report = onnxsurgery.shrink(model, narrow=True)
    narrow = report.pass_report("narrow")
    assert narrow.changed == 0 and narrow.bytes_saved == 0
    assert {s.name: s.reason for s in narrow.skipped} == {"idx": "sparse tensor"}
    assert [t.values.name for t in out.graph.sparse_initializer] == ["idx"]
