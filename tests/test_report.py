"""`onnxsurgery report`: the HTML page and the figures in it. The page itself is opened in
headless Chromium by the web test at the end (`make test-web`)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from onnxsurgery.cli import main
from onnxsurgery.defaults import METHOD_KEYS

ROOT = Path(__file__).resolve().parent.parent
ODD_NAME = '</script><b id="x">"w"'  # a tensor name that must not break out of the page's data


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    """The sample encoder, small (its layers share weights, stored once per layer), with one
    weight renamed to ODD_NAME."""
    folder = tmp_path_factory.mktemp("report")
    subprocess.run([sys.executable, str(ROOT / "samples" / "make_encoder.py"), "--out", str(folder),
                    "--layers", "2", "--hidden", "64", "--only", "shared"], check=True, capture_output=True)
    path = folder / "encoder_shared.onnx"
    model = onnx.load(str(path))
    old = max(model.graph.initializer, key=lambda t: len(t.raw_data)).name
    for t in model.graph.initializer:
        t.name = ODD_NAME if t.name == old else t.name
    for node in model.graph.node:
        node.input[:] = [ODD_NAME if i == old else i for i in node.input]
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def made(encoder):
    out = encoder.with_name("page.html")
    result = CliRunner().invoke(main, ["report", str(encoder), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.output)


def test_one_row_per_method_with_every_figure(made):
    page, data = made
    rows = {r["key"]: r for r in data["methods"]}
    assert list(rows) == ["original", *METHOD_KEYS]
    for key, row in rows.items():
        assert row["failed"] is None, (key, row["failed"])
        for figure in ("bytes", "gzip_bytes", "brotli_bytes", "latency_ms", "memory_bytes", "rel_l2_error"):
            assert row[figure] is not None and row[figure] >= 0, (key, figure)
        assert row["gzip_bytes"] < row["bytes"]
    assert rows["shrink"]["exact"] and rows["shrink"]["bytes"] < rows["original"]["bytes"]
    assert rows["int8"]["bytes"] < rows["original"]["bytes"] / 2
    assert 0 < rows["int8"]["rel_l2_error"] < 0.05
    assert rows["int4"]["bytes"] < rows["int8"]["bytes"]
    assert rows["levels"]["gzip_bytes"] < rows["original"]["gzip_bytes"] * 0.8  # what --levels is for
    # the scratch folder and the files in it are gone: only the input and the page remain
    assert sorted(p.name for p in page.parent.iterdir()) == sorted(["encoder_shared.onnx", "encoder_shared.params",
                                                                    "page.html"])


def test_each_rows_command_makes_that_rows_file(made, tmp_path):
    page, data = made
    for row in data["methods"][1:]:
        args = shlex.split(row["command_line"])
        assert args[0] == "onnxsurgery"
        args[3] = str(tmp_path / args[3])
        result = CliRunner().invoke(main, args[1:])
        assert result.exit_code == 0, (row["key"], result.output)
        assert (tmp_path / Path(args[3]).name).stat().st_size == row["bytes"], row["key"]


def test_page_is_self_contained_and_carries_its_figures(made):
    page, data = made
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)  # nothing fetched
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    payload = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1)
    embedded = json.loads(payload)
    assert embedded == data
    names = [c["name"] for c in embedded["inventory"]["large_constants"]]
    assert ODD_NAME in names
    dup = [c for c in embedded["inventory"]["large_constants"] if c["duplicate_group"] is not None]
    assert dup and all(c["read_by"] for c in dup)


def test_bad_input_is_one_line_and_writes_nothing(encoder, tmp_path):
    out = tmp_path / "r.html"
    for args in (["report", str(tmp_path / "missing.onnx"), "-o", str(out)],
                 ["report", str(encoder), "-o", str(out), "--methods", "int8,int9"],
                 ["report", str(encoder), "-o", str(tmp_path / "no" / "r.html")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("onnxsurgery: error: ") and result.output.count("\n") == 1, result.output
        assert not out.exists()
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07not a model")
    result = CliRunner().invoke(main, ["report", str(garbage), "-o", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert garbage.read_bytes() == b"\x08\x07not a model"


def test_quant_rows_measure_choices_on_inputs_only_where_the_user_gave_them(encoder, tmp_path, monkeypatch):
    """A row's file is what its command makes: without --inputs, `quant` makes its choices from
    the weights alone, so the report's generated sample must not reach the quantizer; given
    samples do (the printed command carries --inputs)."""
    import numpy as np

    from onnxsurgery import evaluate

    seen = []

    def recording(*args, samples=None, **kwargs):
        seen.append(samples)
        return evaluate.quant_file.__wrapped__(*args, samples=samples, **kwargs)

    recording.__wrapped__ = evaluate.quant_file
    monkeypatch.setattr(evaluate, "quant_file", recording)
    int8 = tuple(m for m in evaluate.METHODS if m.key == "int8")
    rows = evaluate.measure_methods(encoder, tmp_path, methods=int8)
    given = [{"input_ids": np.random.default_rng(s).integers(0, 100, (1, 128)).astype(np.int64)} for s in (1, 2)]
    rows_given = evaluate.measure_methods(encoder, tmp_path, methods=int8, samples=given, inputs_file="x.npz")
    assert seen == [None, given]
    for row in (*rows, *rows_given):
        assert row.failed is None and row.rel_l2_error is not None and row.latency_ms > 0
    assert "--inputs x.npz" in rows_given[1].command_line and "--inputs" not in rows[1].command_line


def test_a_method_that_fails_gives_its_row_and_the_others_still_measure(encoder, tmp_path, monkeypatch):
    """Files are measured in the background while the next is made: a method failing between
    two others leaves their figures whole, says why in its own row, and leaves no file behind."""
    from onnxsurgery import evaluate
    from onnxsurgery.errors import UnsupportedModelError

    make = evaluate._make

    def failing(method, source, out, samples, shapes):
        if method.key == "int4":
            out.write_bytes(b"half written")
            raise UnsupportedModelError("int4 refused here")
        return make(method, source, out, samples, shapes)

    monkeypatch.setattr(evaluate, "_make", failing)
    chosen = tuple(m for m in evaluate.METHODS if m.key in ("shrink", "int4", "fp16"))
    rows = {r.key: r for r in evaluate.measure_methods(encoder, tmp_path, methods=chosen)}
    assert rows["int4"].failed == "int4 refused here" and rows["int4"].bytes is None
    for key in ("original", "shrink", "fp16"):
        row = rows[key]
        assert row.failed is None and row.bytes > 0 and row.gzip_bytes > 0 and row.latency_ms > 0, key
    assert rows["shrink"].exact and rows["fp16"].bytes < rows["original"].bytes
    assert list(tmp_path.iterdir()) == []


def test_compressed_sizes_of_large_files_are_estimated_from_pieces_and_said_so(tmp_path, monkeypatch):
    """Files over EXACT_COMPRESSION_BYTES: gzip and brotli sizes from evenly spaced pieces,
    within a few percent of compressing them whole, flagged as estimated; a piece may run
    over from the .onnx into its data file."""
    import numpy as np

    from onnxsurgery import evaluate

    rng = np.random.default_rng(0)
    model, data = tmp_path / "m.onnx", tmp_path / "m.onnx.data"
    model.write_bytes(rng.integers(0, 4, 50_000).astype(np.uint8).tobytes())  # most of a piece: runs over
    # int8-like weights: compressible, unevenly (a third of the file compresses far better)
    body = np.clip(rng.standard_normal(3_000_000) * np.repeat([30.0, 4.0, 30.0], 1_000_000), -127, 127)
    data.write_bytes(body.astype(np.int8).tobytes())
    files = [model, data]
    exact = evaluate._compressed_sizes(files)
    assert exact[2] is False  # under the default threshold: compressed whole
    monkeypatch.setattr(evaluate, "EXACT_COMPRESSION_BYTES", 1 << 20)
    monkeypatch.setattr(evaluate, "SAMPLE_PIECES", 32)
    estimated = evaluate._compressed_sizes(files)
    assert estimated[2] is True
    for got, whole in zip(estimated[:2], exact[:2]):
        if whole is not None:
            assert abs(got / whole - 1) < 0.05, (got, whole)
    pieces = list(evaluate._sampled(files, sum(f.stat().st_size for f in files)))
    assert len(pieces) == 32 and all(len(p) == evaluate.SAMPLE_PIECE_BYTES for p in pieces)


@pytest.mark.web
def test_page_draws_in_chromium_without_errors_or_network(made):
    """The page in headless Chromium with the network refused: no console errors, no requests,
    one table row per method, duplicates marked in the treemap, and the download-cost view
    recomputed from edited inputs. Writes build/report.png for a person to look at."""
    page, data = made
    shot = ROOT / "build" / "report.png"
    shot.parent.mkdir(exist_ok=True)
    proc = subprocess.run(["node", str(ROOT / "tests" / "web" / "view_page.mjs"), str(page), str(shot)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["errors"] == [] and seen["requests"] == []
    assert seen["methods"] == ["original", *METHOD_KEYS] and seen["failed"] == []
    assert seen["boxes"] > 10 and seen["duplicate_boxes"] > 0
    assert seen["title"] == page.parent.joinpath("encoder_shared.onnx").name
    # 1,000,000 downloads at 1 USD per GB, uncompressed: saved per month is the bytes saved in kB
    rows = {r["key"]: r for r in data["methods"]}
    for key in METHOD_KEYS:
        dollars = (rows["original"]["bytes"] - rows[key]["bytes"]) * 1e6 / 1e9
        shown = float(seen["costs"][key].replace("$", "").replace(",", ""))
        assert shown == pytest.approx(dollars, abs=0.01 if dollars < 100 else 0.5), key
    assert shot.stat().st_size > 10_000
