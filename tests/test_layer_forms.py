"""bench/layer_forms.py's layer measure: a reader Conv rebuilt alone computes what the Conv does,
and the relative error is the output's, not the weight's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx_graphsurgeon as gs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import layer_forms  # noqa: E402


def test_conv_outputs_is_the_readers_conv_without_bias():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2, 1, 1)).astype(np.float32)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    node = gs.Node("Conv", attrs={"strides": [1, 1]})
    (y,) = layer_forms.conv_outputs(node, [x], w)
    assert np.allclose(y, np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x), atol=1e-5)


def test_rel_weighs_the_outputs_not_the_weights():
    ref = [np.array([3.0, 4.0])]
    assert layer_forms.rel([np.array([3.0, 4.0])], ref) == 0.0
    assert abs(layer_forms.rel([np.array([3.0, 5.0])], ref) - 0.2) < 1e-12
