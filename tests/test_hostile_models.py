"""Structurally valid but hostile or inconsistent models (the kind exporters and attackers make):
every command must either succeed, its output computing what the input computes, or print one
clean line on stderr with exit 2, write nothing, and leave the input's folder byte for byte as it
was. test_fuzz.py damages bytes, which mostly breaks the protobuf parse; these parse.

Each case is a small function that writes a model (and any files it names) into a folder and
returns the model's path (hostile_cases.py); every command in COMMANDS runs on it through the CLI."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from onnxsurgery.cli import main
from hostile_cases import CASES, N, base, overridable_weight, save


COMMANDS = {
    "info": lambda m, o: ["info", m],
    "shrink": lambda m, o: ["shrink", m, o],
    "shrink --verify": lambda m, o: ["shrink", "--verify", m, o],
    "quant": lambda m, o: ["quant", "--min-elements", "16", m, o],
    "quant int4": lambda m, o: ["quant", "--dtype", "int4", "--min-elements", "16", m, o],
    "quant --fp16": lambda m, o: ["quant", "--fp16", "--min-elements", "16", m, o],
    "quant --no-verify": lambda m, o: ["quant", "--no-verify", "--min-elements", "16", m, o],
    "quant --fp16 --no-verify": lambda m, o: ["quant", "--fp16", "--no-verify", "--min-elements", "16", m, o],
    "quant int4 --no-verify": lambda m, o: ["quant", "--dtype", "int4", "--no-verify", "--min-elements", "16", m, o],
    "quant --inputs": lambda m, o: ["quant", "--inputs", o.parent.parent / "feeds.npz", "--min-elements", "16", m, o],
    "npy": lambda m, o: ["npy", "--min-bytes", "0", m, o],
    "compare": lambda m, o: ["compare", m, m],
}


# Cases whose every command (but those listed) must refuse: a success there is a guess
REFUSED = {
    # which of the two a reader gets is its own choice: quant's verification read the other one
    # than onnxruntime and wrote its result with a warning of 1.48 relative error
    "two_initializers_one_name": {"compare"},
    # an index past the end: onnxruntime refuses it, gs made it a model that ran
    "sparse_out_of_range": {"compare"},
}


def folder_state(folder: Path) -> dict[str, str]:
    """Every entry under `folder` with its kind and, for files, a hash of its bytes."""
    state = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            state[rel] = "link:" + os.readlink(p)
        elif p.is_fifo():
            state[rel] = "fifo"
        elif p.is_dir():
            state[rel] = "dir"
        else:
            state[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return state


def outputs_of(path: Path, feeds) -> list[np.ndarray] | None:
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the inputs' own oddities (opset 0, W as an input) are the point
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception:
        return None


def feeds_for(path: Path) -> dict[str, np.ndarray]:
    m = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == TensorProto.BOOL:
            feeds[i.name] = np.array(True)
        elif t.elem_type == TensorProto.INT64:
            feeds[i.name] = rng.integers(0, N, size=shape).astype(np.int64)
        else:
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def differs(model: Path, out: Path, exact: bool) -> str | None:
    """Why the output written does not compute what the input computes, or None."""
    try:
        feeds = feeds_for(model)
    except Exception:
        return None  # nothing to run it on: the refusal paths above cover such inputs
    expected = outputs_of(model, feeds)
    extra = {}
    if (out.parent / "o.npy.json").exists():
        from onnxsurgery.storage.npy import load_feeds
        extra = load_feeds(out)
    got = outputs_of(out, {**feeds, **extra})
    if expected is None:
        return None if got is None else "the input does not run in onnxruntime, the output does"
    if got is None:
        return "the output does not run"
    for a, b in zip(expected, got):
        if a.shape != b.shape:
            return f"shape {a.shape} -> {b.shape}"
        if exact:
            if a.tobytes() != b.tobytes():
                return "not bit-identical"
            continue
        if (~np.isfinite(b) & np.isfinite(a)).any():
            return "NaN or inf where the input computes a number"
        finite = np.isfinite(a)
        err = np.linalg.norm(a[finite] - b[finite]) / max(np.linalg.norm(a[finite]), 1e-30)
        if err > 0.5:
            return f"relative error {err:.3g}"
    return None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_hostile_model(tmp_path, case):
    src = tmp_path / "in"
    src.mkdir()
    model = case(src)
    before = folder_state(src)
    (tmp_path / "out").mkdir()
    try:
        np.savez(tmp_path / "out" / "feeds.npz", **feeds_for(model))
    except Exception:
        np.savez(tmp_path / "out" / "feeds.npz", x=np.zeros((2, N), np.float32))
    problems = []
    for name, command in COMMANDS.items():
        out_dir = tmp_path / "out" / name.replace(" ", "_")
        out_dir.mkdir(parents=True)
        out = out_dir / "o.onnx"
        r = CliRunner().invoke(main, [str(a) for a in command(model, out)])
        what = f"{name}: exit {r.exit_code} {r.stderr.strip()[-300:]!r} {r.exception!r}"
        print(case.__name__, what)
        if r.exit_code not in (0, 2):
            problems.append(what)
        if case.__name__ in REFUSED and name not in REFUSED[case.__name__] and r.exit_code != 2:
            problems.append("not refused: " + what)
        if folder_state(src) != before:
            problems.append("input changed: " + what)
        if r.exit_code == 2:
            lines = r.stderr.strip().splitlines()
            if not (len(lines) == 1 and lines[0].startswith("onnxsurgery: error:")):
                problems.append("not one line: " + what)
            if list(out_dir.iterdir()):
                problems.append("written: " + what)
        elif name not in ("info", "compare"):
            wrong = differs(model, out, exact=not name.startswith("quant"))
            if wrong:
                problems.append(f"{wrong}: {what}")
    assert not problems, "\n".join(problems)


# -- files: where the output goes -------------------------------------------------------------------

WRITERS = {
    "shrink": lambda m, o: ["shrink", m, o],
    "quant": lambda m, o: ["quant", "--min-elements", "16", m, o],
    "quant --no-verify": lambda m, o: ["quant", "--no-verify", "--min-elements", "16", m, o],
    "npy": lambda m, o: ["npy", "--min-bytes", "0", m, o],
}


def _targets(tmp_path: Path, model: Path) -> dict[str, Path]:
    """Outputs that cannot be written: the input itself (without --in-place), a folder that does
    not exist, a 'folder' that is a file, and (not as root, which may write anywhere) a read-only
    folder. (An existing folder is no error: like cp, the output goes into it.)"""
    (tmp_path / "plain.txt").write_text("not a folder")
    targets = {"the input": model, "missing folder": tmp_path / "nope" / "o.onnx",
               "under a file": tmp_path / "plain.txt" / "o.onnx"}
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o555)
        targets["read-only folder"] = tmp_path / "ro" / "o.onnx"
    return targets


@pytest.mark.parametrize("command", list(WRITERS))
def test_an_output_that_cannot_be_written_is_one_line(tmp_path, command):
    src = tmp_path / "in"
    src.mkdir()
    model = save(src, base())
    before_in, before_all = folder_state(src), folder_state(tmp_path)
    for what, target in _targets(tmp_path, model).items():
        r = CliRunner().invoke(main, [str(a) for a in WRITERS[command](model, target)])
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("onnxsurgery: error:"), \
            f"{what}: {r.exit_code} {r.stderr} {r.exception!r}"
        assert folder_state(src) == before_in, what
    after = folder_state(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith(("plain", "ro"))} == before_all


@pytest.mark.parametrize("command", list(WRITERS))
def test_ctrl_c_while_writing_leaves_no_partial_file(tmp_path, monkeypatch, command):
    """KeyboardInterrupt from inside the writer, after some bytes went out: no output, no
    temporary file beside it, the input as it was, and the interrupted exit code."""
    from onnxsurgery.storage import staging

    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    model = save(src, base())
    before = folder_state(src)
    real = staging.write_pieces

    def interrupted(f, pieces, files):
        f.write(b"partial")
        real(f, pieces[:1], files)
        raise KeyboardInterrupt

    def interrupted_copy(source, target):  # shrink with nothing to merge copies the file
        Path(target).write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(staging, "write_pieces", interrupted)
    monkeypatch.setattr(staging, "copy_large_file", interrupted_copy)
    r = CliRunner().invoke(main, [str(a) for a in WRITERS[command](model, out / "o.onnx")])
    assert r.exit_code == 130, (r.exit_code, r.stderr, r.exception)
    assert "interrupted (Ctrl-C)" in r.stderr
    assert list(out.iterdir()) == [] and folder_state(src) == before


def test_a_nan_error_is_the_worst_wherever_it_comes():
    """max() keeps a NaN only in first place: a sample's NaN error read after a number's passed."""
    from onnxsurgery.running.output_errors import PooledOutputs, compare_outputs, worst_of

    assert np.isnan(worst_of([0.1, float("nan"), 0.2])) and worst_of([0.1, 0.3]) == 0.3 and worst_of([]) == 0.0
    ref = np.ones((2, 4), np.float32)
    nan_ref = ref.copy()
    nan_ref[0, 0] = np.nan  # the original's own NaN where the result has a number
    pooled = PooledOutputs()
    pooled.add(compare_outputs([ref], [ref * 1.01], ["y"]))
    pooled.add(compare_outputs([nan_ref], [ref], ["y"]))
    entry = pooled.finish(["y"], ["y"])["y"]
    assert np.isnan(entry["rel_l2_error"]) and entry["original_not_finite"] == 1 and entry["not_finite"] == 0


def test_a_nan_verdict_is_a_refusal():
    from onnxsurgery.api.verdict import judge
    from onnxsurgery.errors import VerificationError
    from onnxsurgery.report import RunReport

    report = RunReport.__new__(RunReport)
    report.verification = {"rel_l2_error": float("nan"), "outputs": {}, "not_finite": 0, "original_not_finite": 3}
    report.notes, report.warnings = [], []
    with pytest.raises(VerificationError, match="not a number.*original itself computes NaN or infinity at 3"):
        judge(report, None, False)
    report.verification["rel_l2_error"] = 0.01
    judge(report, None, False)
    assert report.notes == ["the original computes NaN or infinity at 3 output values on the verification inputs: "
                            "the errors are over the other values"]


@pytest.mark.parametrize("args", [[], ["--dtype", "int4"], ["--no-verify"]])
def test_an_overridable_weight_stays_overridable(tmp_path, args):
    """W is an initializer and a graph input: quant leaves it a default a caller may replace."""
    model = overridable_weight(tmp_path)
    out = tmp_path / "q.onnx"
    r = CliRunner().invoke(main, ["quant", "--min-elements", "16", *args, str(model), str(out)])
    assert r.exit_code == 0, r.output
    assert "W" in {i.name for i in onnx.load(str(out)).graph.input}
    feeds = {"x": np.ones((2, N), np.float32), "W": np.full((N, N), 0.5, np.float32)}  # another W
    a, b = outputs_of(model, feeds)[0], outputs_of(out, feeds)[0]
    assert np.abs(a - b).max() < 0.05 * np.abs(a).max()  # only b's rounding, not a baked-in W
