"""Issue 38: a model (or its npy manifest) cannot make onnxsurgery read a file outside its folder.

Each crafted model names a "secret" file beside its folder, by an absolute path, by `..`, or
through a symlink in its folder. Every command must refuse it with exit 2 and one line naming
the tensor and the location, and no byte of the secret may appear in anything written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import onnxsurgery
from onnxsurgery.cli import main
from onnxsurgery.errors import InputError, UnsafeLocationError
from onnxsurgery.storage.lazy import ExternalFiles
from onnxsurgery.storage.npy import load_feeds
from onnxsurgery.storage.paths import confined

MARKER = b"TOPSECRET-BYTES!"  # every 4 bytes of it is a finite float32
SECRET = MARKER * 64  # 256 float32 values
N = len(SECRET) // 4


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def external_model(location: str, length: int = len(SECRET)) -> onnx.ModelProto:
    """y = x + w, with w an external tensor at `location`. Built without onnx's checker, which
    would itself look for the file."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[N], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def input_model() -> onnx.ModelProto:
    """y = x + w with w a graph input, as `onnxsurgery npy` leaves a moved constant."""
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [N]) for n in ("x", "w")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def layout(tmp_path):
    """tmp/secret.bin and tmp/secret.npy outside; tmp/models/ for the model; tmp/out/ for outputs."""
    (tmp_path / "secret.bin").write_bytes(SECRET)
    np.save(tmp_path / "secret.npy", np.frombuffer(SECRET, dtype=np.float32))
    (tmp_path / "models").mkdir()
    (tmp_path / "out").mkdir()
    return tmp_path


def model_naming(tmp_path: Path, form: str) -> tuple[Path, str, str]:
    """A model in tmp/models whose w is read from the secret by `form`: (model, location, why)."""
    models = tmp_path / "models"
    if form == "absolute":
        location = str(tmp_path / "secret.bin")
        why = "is an absolute path"
    elif form == "dotdot":
        location, why = "../secret.bin", f"points outside {models.resolve()}"
    else:  # a symlink in the folder, to the file outside it
        os.symlink(tmp_path / "secret.bin", models / "w.bin")
        location, why = "w.bin", f"points outside {models.resolve()}"
    path = models / "m.onnx"
    path.write_bytes(external_model(location).SerializeToString())
    # an empty manifest: `embed` needs one to get as far as opening the model
    (models / "m.npy.json").write_text(json.dumps({"version": 1, "inputs": {}}))
    return path, location, why


def manifest_naming(tmp_path: Path, form: str) -> tuple[Path, str, str]:
    """A model in tmp/models whose manifest names the outside array for input w, its checksum
    made to match, so that only the path rule stops it: (model, file, why)."""
    models = tmp_path / "models"
    if form == "absolute":
        file, why = str(tmp_path / "secret.npy"), "is an absolute path"
    elif form == "dotdot":
        file, why = "../secret.npy", f"points outside {models.resolve()}"
    else:
        os.symlink(tmp_path / "secret.npy", models / "w.npy")
        file, why = "w.npy", f"points outside {models.resolve()}"
    path = models / "m.onnx"
    path.write_bytes(input_model().SerializeToString())
    secret = np.frombuffer(SECRET, dtype=np.float32)
    entry = {"file": file, "dtype": "float32", "shape": [N],
             "sha256": hashlib.sha256(secret.tobytes()).hexdigest()}
    (models / "m.npy.json").write_text(json.dumps({"version": 1, "inputs": {"w": entry}}))
    return path, file, why


def assert_no_secret_written(tmp_path: Path) -> None:
    """No file under tmp (outputs, staging leftovers) holds the secret, but the secret itself."""
    for root, _, names in os.walk(tmp_path):
        for name in names:
            p = Path(root) / name
            if p.is_symlink() or p.parent == tmp_path and p.name.startswith("secret"):
                continue
            assert MARKER not in p.read_bytes(), f"the secret leaked into {p}"


FORMS = ["absolute", "dotdot", "symlink"]

MODEL_COMMANDS = {  # each command with a model and tmp/out
    "shrink": lambda m, o: ["shrink", m, o / "s.onnx"],
    "shrink --verify": lambda m, o: ["shrink", "--verify", m, o / "s.onnx"],
    "shrink --external-data": lambda m, o: ["shrink", "--external-data", m, o / "s.onnx"],
    "quant": lambda m, o: ["quant", "--min-elements", "16", m, o / "q.onnx"],
    "npy": lambda m, o: ["npy", "--min-bytes", "0", m, o / "n.onnx"],
    "info": lambda m, o: ["info", m],
    "check": lambda m, o: ["check", m],
    "report": lambda m, o: ["report", m, "-o", o / "r.html", "--methods", "shrink"],
    "run": lambda m, o: ["run", m, "--save", o / "y.npz"],
    "embed": lambda m, o: ["embed", m, o / "e.onnx"],
    "compare": lambda m, o: ["compare", m, m],
}
# Every command applies the rule itself, `run` and `compare` too (sessions.session checks a
# model's locations before onnxruntime opens it): none is left to onnxruntime's own words


@pytest.mark.parametrize("command", list(MODEL_COMMANDS))
@pytest.mark.parametrize("form", FORMS)
def test_every_command_refuses_an_external_location_outside_the_folder(layout, form, command):
    model, location, why = model_naming(layout, form)
    r = invoke(*MODEL_COMMANDS[command](model, layout / "out"))
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr == f"onnxsurgery: error: tensor 'w': external data location '{location}' {why}\n"
    assert list((layout / "out").iterdir()) == []
    assert_no_secret_written(layout)


MANIFEST_COMMANDS = {
    "run": lambda m, o: ["run", m, "--save", o / "y.npz"],
    "embed": lambda m, o: ["embed", m, o / "e.onnx"],
}


@pytest.mark.parametrize("command", list(MANIFEST_COMMANDS))
@pytest.mark.parametrize("form", FORMS)
def test_run_and_embed_refuse_a_manifest_file_outside_the_folder(layout, form, command):
    model, file, why = manifest_naming(layout, form)
    r = invoke(*MANIFEST_COMMANDS[command](model, layout / "out"))
    assert r.exit_code == 2, r.output
    assert r.stderr == f"onnxsurgery: error: input 'w': npy manifest file '{file}' {why}\n"
    assert list((layout / "out").iterdir()) == []
    assert_no_secret_written(layout)


@pytest.mark.parametrize("form", FORMS)
def test_the_api_raises_the_same_words(layout, form):
    model, location, why = model_naming(layout, form)
    expected = f"tensor 'w': external data location '{location}' {why}"
    for call in (lambda: onnxsurgery.load_model(model), lambda: onnxsurgery.info(model),
                 lambda: onnxsurgery.shrink_file(model, layout / "out" / "s.onnx")):
        with pytest.raises(UnsafeLocationError) as e:
            call()
        assert str(e.value) == expected and isinstance(e.value, InputError)
    model, file, why = manifest_naming(layout, form)
    with pytest.raises(UnsafeLocationError) as e:
        load_feeds(model)
    assert str(e.value) == f"input 'w': npy manifest file '{file}' {why}"
    assert_no_secret_written(layout)


def test_a_symlink_inside_the_folder_to_a_file_inside_it_is_fine(layout):
    models = layout / "models"
    w = np.arange(N, dtype=np.float32)
    (models / "real.bin").write_bytes(w.tobytes())
    os.symlink("real.bin", models / "w.bin")
    model = models / "m.onnx"
    model.write_bytes(external_model("w.bin").SerializeToString())
    out = layout / "out"
    for args in (["shrink", "--verify", "--external-data", model, out / "s.onnx"], ["info", model],
                 ["check", model], ["run", model, "--save", out / "y.npz"]):
        r = invoke(*args)
        assert r.exit_code in (0, 1) and r.stderr == "", r.output  # check: 1 is a finding
    x = np.ones(N, dtype=np.float32)
    assert np.array_equal(onnxsurgery.run_model(out / "s.onnx", {"x": x})["y"], x + w)
    assert np.array_equal(np.load(out / "y.npz")["y"].shape, [N])
    # the manifest's twin: a symlink to an .npy inside the folder
    (models / "in.onnx").write_bytes(input_model().SerializeToString())
    np.save(models / "real.npy", w)
    os.symlink("real.npy", models / "w.npy")
    entry = {"file": "w.npy", "dtype": "float32", "shape": [N], "sha256": hashlib.sha256(w.tobytes()).hexdigest()}
    (models / "in.npy.json").write_text(json.dumps({"version": 1, "inputs": {"w": entry}}))
    assert np.array_equal(load_feeds(models / "in.onnx")["w"], w)
    r = invoke("embed", models / "in.onnx", out / "e.onnx")
    assert r.exit_code == 0, r.output
    assert np.array_equal(onnxsurgery.run_model(out / "e.onnx", {"x": x})["y"], x + w)


def test_confined_refuses_what_is_not_a_regular_file(tmp_path):
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "pipe")  # opening it would block
    os.symlink("loop", tmp_path / "loop")
    for location in ("sub", ".", "sub/..", "pipe", "loop"):
        with pytest.raises(UnsafeLocationError, match=f"^w '{location}' is not a regular file$"):
            confined(tmp_path, location, "w")
    for location in ("C:\\x.bin", "\\x.bin", "/x.bin"):  # absolute to Windows or here
        with pytest.raises(UnsafeLocationError, match="is an absolute path$"):
            confined(tmp_path, location, "w")
    # inside, and `..` that comes back in, are fine; a missing file is left to the caller
    (tmp_path / "a.bin").write_bytes(b"a")
    assert confined(tmp_path, "sub/../a.bin", "w") == (tmp_path / "a.bin").resolve()
    assert confined(tmp_path, "missing.bin", "w") == (tmp_path / "missing.bin").resolve()


def test_a_fifo_as_external_data_is_refused_not_opened(layout):
    models = layout / "models"
    os.mkfifo(models / "w.bin")
    model = models / "m.onnx"
    model.write_bytes(external_model("w.bin").SerializeToString())
    r = invoke("info", model)
    assert r.exit_code == 2
    assert r.stderr == "onnxsurgery: error: tensor 'w': external data location 'w.bin' is not a regular file\n"


def test_external_files_read_refuses_too(layout):
    """The second line: a reference that reaches the reader without `open_model`'s check."""
    files = ExternalFiles(layout / "models", model_file="m.onnx")
    with pytest.raises(UnsafeLocationError, match=r"^tensor 'w': external data location '\.\./secret\.bin' points"):
        files.read("../secret.bin", 0, 16, tensor="w")
    with pytest.raises(UnsafeLocationError, match="is an absolute path"):
        files.read(str(layout / "secret.bin"), 0, 16)
    files.close()


def test_npy_file_names_stay_in_the_npy_folder(tmp_path):
    """Tensor names become file names under the .npy folder only, whatever they hold."""
    arrays = {name: np.full(N, i, dtype=np.float32) for i, name in enumerate(("../../x", "/etc/y", "..", "a/../../z"))}
    nodes, prev = [], "x"
    for i, name in enumerate(arrays):
        nodes.append(helper.make_node("Add", [prev, name], [f"h{i}"]))
        prev = f"h{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [N])],
                              [onnx.numpy_helper.from_array(a, name) for name, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    src = work / "in.onnx"
    onnx.save(model, str(src))
    before = {p for p in tmp_path.rglob("*")}
    r = invoke("npy", "--min-bytes", "0", "--no-merge", src, work / "out.onnx")
    assert r.exit_code == 0, r.output
    new = {p for p in tmp_path.rglob("*")} - before
    npy_dir = work / "out.npy"
    assert new == {work / "out.onnx", work / "out.npy.json", npy_dir} | set(npy_dir.iterdir())
    assert len(list(npy_dir.iterdir())) == len(arrays)
    manifest = json.loads((work / "out.npy.json").read_text())["inputs"]
    assert set(manifest) == set(arrays)
    for entry in manifest.values():
        assert (work / entry["file"]).resolve().parent == npy_dir.resolve()
    feeds = load_feeds(work / "out.onnx")
    assert all(np.array_equal(feeds[name], a) for name, a in arrays.items())
