"""npy -> run -> embed: constants out to .npy files and back, exactly."""

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from conftest import assert_same_outputs, builders, run

import onnxsurgery
from onnxsurgery.cli import main
from onnxsurgery.errors import InputError
from onnxsurgery.storage.npy import load_feeds, manifest_path

CASES = ["duplicate_initializers", "duplicate_constant_nodes", "if_and_loop_subgraphs", "fp16_and_int64"]


@pytest.mark.parametrize("case", CASES)
def test_npy_then_embed_is_exact(tmp_path, save, case):
    m = getattr(builders, case)()
    src = save(m)
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    report = onnxsurgery.npy_file(src, out, min_bytes=1)
    moved = report.pass_report("externalize")
    assert moved.changed >= 1
    saved = onnx.load(str(out))
    inputs = {i.name for i in saved.graph.input}
    feeds = load_feeds(out)
    assert set(feeds) <= inputs and len(feeds) == moved.changed
    # nothing of what moved is left inside the model
    assert not any(t.name in feeds for t in saved.graph.initializer)
    for seed in (0, 1):
        f = builders.feeds_for(m, seed)
        # run_model gives the arrays back as initializers: the original's graph, its outputs exactly
        for a, b in zip(run(m, f), onnxsurgery.run_model(out, f).values()):
            assert a.tobytes() == b.tobytes()
        # fed as inputs, as a user's own runtime may do: onnxruntime then takes another kernel path
        # for data than for constants, which on some CPUs (AVX-512) rounds differently in the last
        # bit; float32 closeness is what it guarantees there
        for a, b in zip(run(m, f), run(out, {**f, **feeds})):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    back = tmp_path / "back.onnx"
    onnxsurgery.embed_file(out, back)
    restored = onnx.load(str(back))
    assert {i.name for i in restored.graph.input} == {i.name for i in m.graph.input}
    assert_same_outputs(m, back)


def test_run_gives_the_npy_arrays_as_initializers_so_outputs_are_exact_on_any_cpu(tmp_path, save):
    """A MatMul whose weight moved to a .npy file: fed as a graph input, onnxruntime multiplies
    with its kernel for data (on an AVX-512 CPU it differs from the initializer's path by ~1e-5
    here); run_model gives the weight back as an initializer, so it is the original's path."""
    from onnxsurgery.running.sessions import session

    w = builders.rand((256, 256), 3)
    model = builders.model([onnx.helper.make_node("MatMul", ["x", "W"], ["h"]),
                            onnx.helper.make_node("MatMul", ["h", "W"], ["y"])],
                           [builders.vi("x", shape=[8, 256])], [builders.vi("y", shape=[8, 256])],
                           [onnx.numpy_helper.from_array(w, "W")])
    src = save(model)
    out = tmp_path / "m.onnx"
    assert onnxsurgery.npy_file(src, out).pass_report("externalize").details["inputs"] == ["W"]
    arrays = load_feeds(out)
    assert "W" in {i.name for i in onnx.load(str(out)).graph.input}
    assert [i.name for i in session(out, initializers=arrays).get_inputs()] == ["x"]
    for seed in (0, 1):
        feeds = builders.feeds_for(model, seed)
        assert [a.tobytes() for a in onnxsurgery.run_model(out, feeds).values()] == \
            [a.tobytes() for a in run(model, feeds)]
        # a feed given by name still overrides the stored array
        zeros = onnxsurgery.run_model(out, {**feeds, "W": np.zeros_like(w)})["y"]
        assert not zeros.any()


def test_default_moves_constants_used_more_than_once(tmp_path, save):
    m = builders.duplicate_initializers(n_copies=3)  # one W after merging, read 3 times
    src = save(m)
    report = onnxsurgery.npy_file(src, tmp_path / "m.onnx")
    assert report.pass_report("externalize").details["inputs"] == ["W0"]
    manifest = json.loads(manifest_path(tmp_path / "m.onnx").read_text())
    entry = manifest["inputs"]["W0"]
    assert entry["shape"] == [16, 16] and entry["dtype"] == "float32" and len(entry["sha256"]) == 64
    assert (tmp_path / entry["file"]).is_file()


def test_select_by_op_type_and_name(tmp_path, save):
    m = builders.narrowing_cases()
    src = save(m)
    r = onnxsurgery.npy_file(src, tmp_path / "a.onnx", ops=("Gather",))
    assert r.pass_report("externalize").details["inputs"] == ["idx"]
    r = onnxsurgery.npy_file(src, tmp_path / "b.onnx", names=("dbl",))
    assert r.pass_report("externalize").details["inputs"] == ["dbl"]


@pytest.fixture
def externalized(tmp_path, save):
    src = save(builders.duplicate_initializers(n_copies=3))
    out = tmp_path / "m.onnx"
    onnxsurgery.npy_file(src, out)
    file = tmp_path / json.loads(manifest_path(out).read_text())["inputs"]["W0"]["file"]
    return out, file


def test_missing_file_is_named(externalized):
    out, file = externalized
    file.unlink()
    with pytest.raises(InputError, match="missing weights file.*W0"):
        load_feeds(out)


def test_wrong_shape_is_named(externalized):
    out, file = externalized
    np.save(file, np.zeros((4, 4), np.float32))
    with pytest.raises(InputError, match=r"float32\[4, 4\].*float32\[16, 16\]"):
        load_feeds(out)


def test_changed_checksum_is_named(externalized):
    out, file = externalized
    arr = np.load(file)
    arr[0, 0] += 1
    np.save(file, arr)
    with pytest.raises(InputError, match="checksum"):
        load_feeds(out)


def test_cli_npy_run_embed(tmp_path, save):
    m = builders.if_and_loop_subgraphs()
    src = save(m)
    runner = CliRunner()
    r = runner.invoke(main, ["npy", str(src), str(tmp_path / "m.onnx"), "--shared"])
    assert r.exit_code == 0, r.output
    assert "moved 2 constants" in r.output
    feeds = builders.feeds_for(m)
    np.savez(tmp_path / "in.npz", **feeds)
    r = runner.invoke(main, ["run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
                             "--save", str(tmp_path / "outs.npz")])
    assert r.exit_code == 0, r.output
    assert np.load(tmp_path / "outs.npz")["y"].tobytes() == run(m, feeds)[0].tobytes()
    r = runner.invoke(main, ["embed", str(tmp_path / "m.onnx"), str(tmp_path / "back.onnx")])
    assert r.exit_code == 0, r.output
    assert_same_outputs(m, tmp_path / "back.onnx")
    # embed on a model without a manifest is a one-line error
    r = runner.invoke(main, ["embed", str(src), str(tmp_path / "x.onnx")])
    assert r.exit_code == 2 and "no manifest" in r.output


def test_npy_external_data_writes_standard_pair(tmp_path, save):
    m = builders.duplicate_initializers(n_copies=3, size=32)
    src = save(m)
    out = tmp_path / "e.onnx"
    report = onnxsurgery.npy_file(src, out, external_data=True)
    assert (tmp_path / "e.onnx.data").is_file()
    assert not manifest_path(out).exists()
    assert report.pass_report("merge_duplicates").changed == 2
    assert_same_outputs(m, out)


def test_the_npy_folder_takes_the_umask_like_any_other_output(tmp_path, save):
    """Issue 57, item 9: mkdtemp's 0700 made the shipped .npy folder private under umask 022."""
    import os

    src = save(builders.duplicate_initializers())
    old = os.umask(0o022)
    try:
        onnxsurgery.npy_file(src, tmp_path / "g.onnx", min_bytes=0)
    finally:
        os.umask(old)
    folder = tmp_path / "g.npy"
    assert folder.is_dir() and oct(folder.stat().st_mode & 0o777) == oct(0o755)
    assert all(oct(p.stat().st_mode & 0o777) == oct(0o644) for p in folder.iterdir())


def test_npy_moves_the_weights_by_default(tmp_path, save):
    """Issue 57, item 8: the default moved only constants read more than once, so nothing on a
    real model (each weight read once). Now every constant of 1 KB or more moves; a selection
    that moves nothing says so and what would."""
    src = save(builders.quant_cases())  # weights of 16-33 KB, each read once but W_mm, a bias of 256 B
    r = CliRunner().invoke(main, ["npy", str(src), str(tmp_path / "m.onnx")])
    assert r.exit_code == 0, r.output
    assert "moved 4 constants" in r.output
    manifest = json.loads((tmp_path / "m.npy.json").read_text())
    assert sorted(manifest["inputs"]) == ["E", "W_const", "W_if", "W_mm"]
    r = CliRunner().invoke(main, ["npy", str(src), str(tmp_path / "n.onnx"), "--min-bytes", "1000000"])
    assert r.exit_code == 0 and "moved nothing: no constant of at least 1000000 bytes" in r.output, r.output
    r = CliRunner().invoke(main, ["npy", str(src), str(tmp_path / "s.onnx"), "--shared", "--min-bytes", "5"])
    assert r.exit_code == 2 and "--shared" in r.output
