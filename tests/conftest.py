import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import builders  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--require-deps", action="store_true",
                     help="A test module that pytest.importorskip()s a missing package fails instead of skipping "
                          "(`make test` passes it: the dev extra installs every package the tests import).")


def pytest_configure(config):
    if config.getoption("--require-deps"):
        pytest.importorskip = _required_import


def _required_import(modname, minversion=None, reason=None, **kwargs):
    """pytest.importorskip under --require-deps: a missing package is a failure naming it."""
    import importlib

    try:
        module = importlib.import_module(modname)
    except ImportError as e:
        raise ImportError(f"tests need '{modname}' ({e}); `make install` installs it (pyproject.toml, the dev "
                          "extra), or run pytest without --require-deps to skip these tests") from None
    if minversion is not None:
        from packaging.version import Version

        if Version(getattr(module, "__version__", "0")) < Version(minversion):
            raise ImportError(f"tests need '{modname}' >= {minversion}, found {module.__version__}")
    return module


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
    from onnxsurgery.storage.protos import all_tensor_protos

    return list(all_tensor_protos(model.graph))


@pytest.fixture
def run_batches(monkeypatch):
    """The batch size of every onnxruntime run a comparison makes (its input "x"), through the
    running/runs.py seam."""
    from onnxsurgery.running import runs as seam

    seen, real = [], seam.run
    monkeypatch.setattr(seam, "run", lambda sess, names, feeds: seen.append(feeds["x"].shape[0])
                        or real(sess, names, feeds))
    return seen


@pytest.fixture
def save(tmp_path):
    def _save(model, name="in.onnx"):
        path = tmp_path / name
        onnx.save(model, str(path))
        return path

    return _save


def stored_float_payload(model):
    return sum(np.prod(t.dims) * 4 for t in all_tensors(model) if t.data_type == onnx.TensorProto.FLOAT)


@pytest.fixture
def int4_forms_alone(monkeypatch):
    """--dtype int4's per-weight forms (choices/int4_paths.py) without the plan-level rule that keeps the
    int8 default's plan where they save little (choices/int4_saving.py): tiny models built to show one
    form save under its line (a lone Gemm head stays int8 under int4 either way)."""
    from onnxsurgery.quantization.choices import int4_saving

    monkeypatch.setattr(int4_saving, "SAVING", 0.0)
