"""The command line through click's CliRunner."""

import json
from pathlib import Path

import numpy as np
import pytest
import onnx
from click.testing import CliRunner
from conftest import assert_same_outputs, builders

from onnxsurgery.cli import main


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_shrink_prints_table_and_writes_verified_output(tmp_path, save):
    src = save(builders.if_and_loop_subgraphs())
    out = tmp_path / "out.onnx"
    r = invoke("shrink", src, out, "--verify")
    assert r.exit_code == 0, r.output
    assert "merged 4 constants in 2 groups" in r.output
    assert "bit-identical" in r.output
    assert_same_outputs(builders.if_and_loop_subgraphs(), out)


def test_shrink_json(tmp_path, save):
    src = save(builders.duplicate_initializers(n_copies=3))
    r = invoke("shrink", src, tmp_path / "o.onnx", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["bytes_after"] < data["bytes_before"]
    merge = next(p for p in data["passes"] if p["name"] == "merge_duplicates")
    assert merge["details"]["constants_merged"] == 2


def test_shrink_several_inputs_into_folder(tmp_path, save):
    a = save(builders.duplicate_initializers(), "a.onnx")
    b = save(builders.duplicate_constant_nodes(), "b.onnx")
    dest = tmp_path / "dest"
    dest.mkdir()
    r = invoke("shrink", a, b, dest)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in dest.iterdir()) == ["a.onnx", "b.onnx"]
    assert_same_outputs(builders.duplicate_initializers(), dest / "a.onnx")
    assert_same_outputs(builders.duplicate_constant_nodes(), dest / "b.onnx")


def test_several_inputs_need_an_existing_folder(tmp_path, save):
    a = save(builders.duplicate_initializers(), "a.onnx")
    r = invoke("shrink", a, a, tmp_path / "nope")
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "existing folder" in r.output


def test_bad_input_is_one_line_and_nonzero(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage\xff" * 10)
    r = invoke("shrink", bad, tmp_path / "o.onnx")
    assert r.exit_code == 2
    assert r.output.strip().startswith("onnxsurgery: error:")
    assert "Traceback" not in r.output and r.output.count("\n") == 1
    assert bad.read_bytes() == b"\x00garbage\xff" * 10
    assert not (tmp_path / "o.onnx").exists()


def test_refuses_to_overwrite_input_without_in_place(save):
    src = save(builders.duplicate_initializers())
    before = src.read_bytes()
    r = invoke("shrink", src, src)
    assert r.exit_code == 2 and "--in-place" in r.output
    assert src.read_bytes() == before
    r = invoke("shrink", src, src, "--in-place")
    assert r.exit_code == 0 and len(src.read_bytes()) < len(before)


def test_info_table_and_json(save):
    src = save(builders.if_and_loop_subgraphs())
    r = invoke("info", src, "--min-bytes", 1)
    assert r.exit_code == 0, r.output
    assert "Constant node in If_0.then_branch" in r.output
    assert "Duplicate groups: 2" in r.output
    before = src.read_bytes()
    r = invoke("info", src, "--json", "--min-bytes", 1)
    data = json.loads(r.output)
    assert data["savings"]["shrink"] == 3 * 256 + 64
    assert set(data["savings"]) == {"shrink", "quant int8", "quant int4", "quant --fp16"}
    assert {c["name"] for c in data["large_constants"]} >= {"W", "then_W", "else_W", "body_W"}
    assert data["weight_bytes"] + data["other_bytes"] == data["model_bytes"]
    assert src.read_bytes() == before  # info writes nothing


def test_module_entry_point(save, tmp_path):
    import subprocess
    import sys

    src = save(builders.duplicate_initializers())
    r = subprocess.run([sys.executable, "-m", "onnxsurgery", "shrink", str(src), str(tmp_path / "o.onnx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert onnx.load(str(tmp_path / "o.onnx")).graph.initializer[0].name == "W0"


def test_info_estimates_quant_savings(save):
    src = save(builders.quant_cases())  # 4 float weights of 4096+ elements, W_mm read twice
    data = invoke("info", src, "--json")
    data = json.loads(data.output)
    n = 128 * 64 + 3 * 64 * 64
    float_bytes = 4 * n
    int8 = data["savings"]["quant int8"]
    assert float_bytes - 1.2 * n <= int8 <= float_bytes - n  # q bytes plus scales and zero points
    assert data["savings"]["quant int4"] > int8 > data["savings"]["quant --fp16"]
    # the estimate is what quant then saves (its payload), for the default and for int4
    for method, args in (("quant int8", ()), ("quant int4", ("--dtype", "int4"))):
        out = Path(src).with_suffix(f".{method[-4:]}.onnx")
        report = json.loads(invoke("quant", src, str(out), "--no-verify", "--json", *args).output)
        saved = sum(p["bytes_saved"] for p in report["passes"])
        assert data["savings"][method] == saved, method


def test_model_that_fails_on_generated_inputs_says_how_to_feed_it(tmp_path):
    """One line on stderr (onnxruntime's own error log silenced), naming the generated shapes
    and --inputs/--shape; nothing written. With --shape it goes through."""
    import subprocess
    import sys

    from onnx import TensorProto, helper, numpy_helper

    b = builders
    m = b.model([helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("MatMul", ["r", "W"], ["y"])],
                [b.vi("x", shape=[1, "n"])], [b.vi("y", shape=[1, 64])],
                [numpy_helper.from_array(np.array([1, 64], np.int64), "shape"),
                 numpy_helper.from_array(b.rand((64, 64), 3), "W")])
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(m, str(src))
    cmd = [sys.executable, "-m", "onnxsurgery", "quant", str(src), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("onnxsurgery: error: ")
    assert "generated inputs (x:1x32)" in r.stderr and "--shape" in r.stderr and "--inputs" in r.stderr
    assert not out.exists() and TensorProto.FLOAT == onnx.load(str(src)).graph.initializer[1].data_type
    r = subprocess.run(cmd + ["--shape", "x:1x64"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.exists()


def test_quant_warns_when_its_own_verification_is_bad(tmp_path, save):
    """int4, one scale per tensor, on a weight with an outlier: the outputs differ visibly.
    The file is written (no --max-error) and the run ends with one warning line on stderr that
    names the fixes; the default int8 result of the same model gets none."""
    from onnx import helper, numpy_helper

    w = builders.rand((64, 32), 1) * 0.1
    w[0, 0] = 20.0
    model = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[8, 64])],
                           [builders.vi("y", shape=[8, 32])], [numpy_helper.from_array(w, "W")])
    src = save(model)
    r = invoke("quant", src, tmp_path / "bad.onnx", "--dtype", "int4", "--granularity", "tensor",
               "--min-elements", "16")
    assert r.exit_code == 0 and (tmp_path / "bad.onnx").exists(), r.output
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("onnxsurgery: warning: relative L2 output error") and "--dtype int8" in line
    assert "--target-error" in line and "--calibration" in line
    assert "on generated inputs (give --inputs with real data" in line  # the figure may not hold on real data
    r = invoke("quant", src, tmp_path / "ok.onnx", "--min-elements", "16")
    assert r.exit_code == 0 and r.stderr == "", r.output


# -- issue 49, item 7: a newcomer's first hour ---------------------------------------------------


def _one_error_line(r, words: str) -> None:
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("onnxsurgery: error: ") and words in r.output, r.output
    assert "internal error" not in r.output and "Traceback" not in r.output


def test_run_save_into_a_missing_folder_is_one_line_before_running(tmp_path, save):
    src = save(builders.duplicate_initializers())
    r = invoke("run", src, "--save", tmp_path / "nodir" / "o.npz")
    _one_error_line(r, "output folder does not exist")
    assert "min" not in r.output  # refused before the model ran, not after printing its result


def test_run_save_refuses_a_name_numpy_would_append_npz_to(tmp_path, save):
    src = save(builders.duplicate_initializers())
    before = sorted(p.name for p in tmp_path.iterdir())
    r = invoke("run", src, "--save", src)
    _one_error_line(r, "ending in .npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no model.onnx.npz


def test_run_save_writes_the_outputs(tmp_path, save):
    src = save(builders.duplicate_initializers())
    r = invoke("run", src, "--save", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    assert sorted(np.load(tmp_path / "o.npz").files) and not list(tmp_path.glob(".o.npz*"))


@pytest.mark.parametrize("args", [
    ["npy", "{d}", "{t}/o.onnx"], ["embed", "{d}", "{t}/o.onnx"], ["run", "{d}"],
    ["report", "{d}"], ["compare", "{d}", "{m}"], ["compare", "{m}", "{d}"],
])
def test_a_folder_given_as_a_model_says_is_a_directory_in_every_command(tmp_path, save, args):
    model = save(builders.duplicate_initializers())
    folder = tmp_path / "folder"
    folder.mkdir()
    r = invoke(*[a.format(d=folder, t=tmp_path, m=model) for a in args])
    _one_error_line(r, f"input is a directory, not an .onnx file: {folder}")


@pytest.mark.parametrize("args", [["shrink", "{d}", "{t}/o"], ["quant", "{d}", "{t}/o"], ["quant", "{d}", "--dry-run"],
                                  ["info", "{d}"], ["check", "{d}"]])
def test_shrink_and_quant_take_a_model_folder_and_say_when_it_holds_none(tmp_path, args):
    """shrink, quant, info and check take a model folder (tests/test_model_folders.py); one with
    no model says so, "is a directory" as the others say it."""
    folder = tmp_path / "folder"
    folder.mkdir()
    r = invoke(*[a.format(d=folder, t=tmp_path) for a in args])
    _one_error_line(r, f"input is a directory with no .onnx file (nor genai_config.json): {folder}")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("content", [b"not an archive", b"\x93NUMPY", b""])
def test_inputs_that_are_not_an_npz_are_one_clear_line(tmp_path, save, content):
    src = save(builders.duplicate_initializers())
    (tmp_path / "x.npz").write_bytes(content)
    for args in (["run", src], ["compare", src, src], ["shrink", src, tmp_path / "o.onnx", "--verify"]):
        r = invoke(*args, "--inputs", tmp_path / "x.npz")
        _one_error_line(r, "is not an .npz file")
        assert "pickle" not in r.output


def test_the_same_path_refusal_names_the_flag_in_the_cli_and_the_keyword_in_the_api(tmp_path, save):
    import onnxsurgery
    from onnxsurgery.errors import OutputError

    src = save(builders.duplicate_initializers())
    for command in ("shrink", "quant", "npy"):
        r = invoke(command, src, src)
        _one_error_line(r, "pass --in-place to overwrite it")
    for call in (onnxsurgery.shrink_file, onnxsurgery.quant_file, onnxsurgery.npy_file):
        with pytest.raises(OutputError, match=r"pass in_place=True to overwrite it") as caught:
            call(src, src)
        assert "--in-place" not in str(caught.value)
