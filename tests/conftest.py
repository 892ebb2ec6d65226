import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import builders  # noqa: E402


def run(model, feeds):
    """Outputs of `model` (ModelProto or path) in a real onnxruntime session."""
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_same_outputs(original, result, seeds=(0, 1)):
    """Bit-for-bit equal outputs on several generated inputs."""
    if not isinstance(original, onnx.ModelProto):
        original = onnx.load(str(original))
    for seed in seeds:
        feeds = builders.feeds_for(original, seed)
        for a, b in zip(run(original, feeds), run(result, feeds)):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes()


def all_tensors(model: onnx.ModelProto):
    from onnxsurgery.protos import all_tensor_protos

    return list(all_tensor_protos(model.graph))


@pytest.fixture
def save(tmp_path):
    def _save(model, name="in.onnx"):
        path = tmp_path / name
        onnx.save(model, str(path))
        return path

    return _save


def stored_float_payload(model):
    return sum(np.prod(t.dims) * 4 for t in all_tensors(model) if t.data_type == onnx.TensorProto.FLOAT)
