"""The thirteenth round's zoo inputs where they need no package: the seizure detector's spectrogram
columns (zoo/ieeg.py) as brainmaze's preprocess_input computes them (scipy's in numpy; the seals
and text lines need Pillow, which `make test` does not install), and zoo/own_run.py's growth."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def test_ieeg_columns_are_100_bins_every_half_second_each_bin_z_scored():
    from zoo import ieeg

    x = ieeg.spectrogram_columns(ieeg.ieeg_window(np.random.default_rng(0)))
    assert x.shape == (1, 100, 2 * ieeg.SECONDS - 1) and x.dtype == np.float32
    assert np.allclose(x.mean(axis=2), 0, atol=1e-4) and np.allclose(x.std(axis=2), 1, atol=1e-3)


def test_tukey_is_scipys_periodic_window():
    from zoo import ieeg

    w = ieeg._tukey(250)  # scipy.signal.get_window(("tukey", 0.25), 250): checked equal to the last bit
    assert w.shape == (250,) and w[0] == 0 and np.allclose(w[1:], w[1:][::-1]) and (w[32:219] == 1).all()
    assert 0 < w[1] < w[31] < 1


def test_ieeg_seizure_raises_the_low_bins_where_it_is():
    rng = np.random.default_rng(3)
    from zoo import ieeg

    x = ieeg.spectrogram_columns(ieeg.ieeg_window(rng))[0]
    low = x[2:10].mean(axis=0)  # 2-9 Hz: the discharge's band
    assert low.max() > 2 and (low > 0.5).sum() >= 2 * 30  # at least 30 s of it, over the rest


def test_ieeg_tune_and_report_windows_differ():
    from zoo import ieeg

    tune, report = ieeg.ieeg_seizure_windows(None, 0, 1), ieeg.ieeg_seizure_windows(None, 1000, 1)
    assert not np.allclose(tune[0]["x"], report[0]["x"])


def test_a_run_alone_counts_its_growth_from_its_own_start_not_the_cli_baseline():
    from types import SimpleNamespace

    from zoo.own_run import own_growth

    mib = 2**20
    ran = SimpleNamespace(stdout=f"{22 * mib}\n", peak_anon=210 * mib)
    assert own_growth(ran, 46 * mib) == 188 * mib  # the seal detector's session at 736 x 736
    assert own_growth(SimpleNamespace(stdout="", peak_anon=210 * mib), 46 * mib) == 164 * mib  # no line: as before


def _relu_model_and_feeds(model_path: Path, feeds_path: Path) -> Path:
    """A one-Relu model saved at model_path and its feeds at feeds_path; own_run.py's path."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model_path))
    np.savez(feeds_path, x=np.ones((1, 4), np.float32))
    return Path(__file__).resolve().parent.parent / "zoo" / "own_run.py"


def test_own_run_prints_its_memory_before_the_session(tmp_path):
    import subprocess

    own_run = _relu_model_and_feeds(tmp_path / "m.onnx", tmp_path / "r.npz")
    out = subprocess.run([sys.executable, str(own_run), str(tmp_path / "m.onnx"), str(tmp_path / "r.npz")],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) == 1 and int(out[0]) > 0


def test_own_run_opens_the_model_in_a_folder_variant(tmp_path):
    """The folder variant is a directory (model.onnx + model.onnx.data): own_run loads the
    model in it, where onnxruntime given the directory failed and no activations were counted."""
    import subprocess

    folder = tmp_path / "m_folder"
    folder.mkdir()
    own_run = _relu_model_and_feeds(folder / "model.onnx", tmp_path / "r.npz")
    ran = subprocess.run([sys.executable, str(own_run), str(folder), str(tmp_path / "r.npz")],
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-300:]
