"""Issue 57, item 1: an output the system will not let us write (a path through a regular file,
a folder without write permission, a disk that refuses a write) is one line and exit 2 from the
CLI, and an OnnxSurgeryError (OutputError) from the Python API, with nothing left behind."""

from __future__ import annotations

import os
import tempfile

import pytest
from click.testing import CliRunner
from conftest import builders

import onnxsurgery
from onnxsurgery.cli import main
from onnxsurgery.errors import OutputError


def invoke(*args):
    return CliRunner().invoke(main, ["-q", *map(str, args)])


def one_error_line(r, words: str) -> None:
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("onnxsurgery: error: ") and words in r.output, r.output
    assert "internal error" not in r.output and "Traceback" not in r.output


def hidden(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


@pytest.fixture
def models(tmp_path, save):
    """A model with weights quant takes, one with copies shrink merges, and a regular file that an
    output path runs through (`a_file/x.onnx`: NotADirectoryError, root or not)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    return save(builders.quant_cases(), "q.onnx"), save(builders.duplicate_initializers(), "d.onnx"), a_file


@pytest.mark.parametrize("command", [
    ("quant", "{q}", "{f}/x.onnx"),
    ("shrink", "{d}", "{f}/x.onnx"),
    ("npy", "{d}", "{f}/x.onnx"),
    ("npy", "{d}", "{tmp}/x.onnx", "--npy-dir", "{f}/arrays"),
    ("embed", "{d}", "{f}/x.onnx"),
    ("report", "{d}", "-o", "{f}/x.html", "--methods", "shrink"),
], ids=["quant", "shrink", "npy", "npy-dir", "embed", "report"])
def test_an_output_under_a_regular_file_is_one_line(models, tmp_path, command):
    q, d, a_file = models
    args = [c.format(q=q, d=d, f=a_file, tmp=tmp_path) for c in command]
    r = invoke(*args)
    one_error_line(r, "is a file")
    assert hidden(tmp_path) == []


def test_the_api_raises_output_error_for_a_path_under_a_file(models):
    q, d, a_file = models
    for call in (lambda: onnxsurgery.quant_file(q, a_file / "x.onnx"),
                 lambda: onnxsurgery.shrink_file(d, a_file / "x.onnx"),
                 lambda: onnxsurgery.npy_file(d, a_file / "x.onnx"),
                 lambda: onnxsurgery.report_file(d, a_file / "x.html", methods=("shrink",))):
        with pytest.raises(OutputError, match="is a file"):
            call()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder: chmod does not stop it "
                    "(the refused write itself is covered by the monkeypatched tests below)")
def test_a_read_only_folder_is_one_line(models, tmp_path):
    q, d, _ = models
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        for args in (("quant", q, locked / "x.onnx"), ("shrink", d, locked / "x.onnx"), ("npy", d, locked / "x.onnx"),
                     ("report", d, "-o", locked / "x.html", "--methods", "shrink")):
            one_error_line(invoke(*args), "permission denied")
        with pytest.raises(OutputError):
            onnxsurgery.quant_file(q, locked / "x.onnx")
    finally:
        locked.chmod(0o755)


def test_a_folder_we_may_not_write_is_refused_before_any_work(models, tmp_path, monkeypatch):
    """What os.access says for a non-root user in a read-only folder (root passes the check)."""
    q, d, _ = models
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if str(path) == str(tmp_path) else
                        real(path, mode, **kw))
    one_error_line(invoke("quant", q, tmp_path / "x.onnx"), "permission denied")
    with pytest.raises(OutputError, match="permission denied"):
        onnxsurgery.quant_file(q, tmp_path / "x.onnx")


def test_a_write_the_system_refuses_midway_is_one_line_and_an_output_error(models, tmp_path, monkeypatch):
    """A PermissionError where the checks above passed (root in a read-only folder, a quota, a
    full disk): the temporary files' own writes raise it."""
    q, d, _ = models

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".x.onnx.tmp"))

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    for args in (("quant", q, tmp_path / "x.onnx"), ("shrink", d, tmp_path / "x.onnx"),
                 ("npy", d, tmp_path / "x.onnx"), ("report", d, "-o", tmp_path / "x.html", "--methods", "shrink")):
        r = invoke(*args)
        one_error_line(r, "Permission denied")
    with pytest.raises(OutputError, match="Permission denied"):
        onnxsurgery.quant_file(q, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists() and hidden(tmp_path) == []


def test_run_save_under_a_regular_file_is_one_line(models):
    _, d, a_file = models
    one_error_line(invoke("run", d, "--save", a_file / "o.npz"), "is a file")
