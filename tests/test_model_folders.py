"""A model folder in, a folder out (issue 49, item 10): `quant FOLDER OUT_FOLDER` and `shrink
FOLDER OUT_FOLDER` on an onnxruntime-genai export (model.onnx, model.onnx.data, genai_config.json,
tokenizer files) and on an optimum-like folder (several .onnx files, configs, a subfolder) write
a folder that runs as it is: in onnxruntime-genai, tokenizer included, for the builder's tiny
decoder (tests/fixtures/make_decoders.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import builders
from decoder_runs import LLAMA, VOCAB, genai_greedy, onnxruntime_greedy, prompts
from onnxsurgery.api.folders import quant_folder
from onnxsurgery.cli import main
from onnxsurgery.errors import OutputError, VerificationError


def invoke(*args):
    return CliRunner().invoke(main, ["-q", *map(str, args)])


def _tokenizer_files(folder: Path) -> None:
    """A tokenizer "w4 w5 ..." over the vocabulary, as the builder's export carries one (the
    fixture does not keep it): tokenizer.json and tokenizer_config.json. A BPE model without
    merges, which onnxruntime-genai's tokenizer loads and decodes (its word-level and WordPiece
    forms it refuses to parse); it cannot encode "w5" without byte-level merges, so the test
    decodes only."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{f"w{i}": i for i in range(4, VOCAB)}}
    tok = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "pad_token": "<pad>", "unk_token": "<unk>", "model_max_length": 128}))
    (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))


@pytest.fixture(scope="module")
def genai_export(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("export") / "llama"
    shutil.copytree(LLAMA, folder)
    pytest.importorskip("tokenizers")
    _tokenizer_files(folder)
    return folder


@pytest.mark.parametrize("args", [[], ["--dtype", "int4"]], ids=["int8", "int4"])
def test_quant_of_a_genai_folder_runs_in_onnxruntime_genai_as_it_is(genai_export, tmp_path, args):
    og = pytest.importorskip("onnxruntime_genai")
    out = tmp_path / "out"
    r = invoke("quant", genai_export, out, *args)
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in out.iterdir())
    assert names == ["genai_config.json", "model.onnx", "model.onnx.data", "special_tokens_map.json",
                     "tokenizer.json", "tokenizer_config.json"]
    for name in ("genai_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (genai_export / name).read_bytes()
    assert (out / "model.onnx.data").stat().st_size < (genai_export / "model.onnx.data").stat().st_size / 2
    # the model's weights are in the data file its .onnx names, beside it
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"model.onnx.data"}
    # onnxruntime-genai reads the folder: config, model, data and tokenizer
    tokens = genai_greedy(out, prompts())
    # as plain onnxruntime computes the same file (test_genai_decoder.py: 5 of 6, float rounding ties)
    assert sum(a == b for a, b in zip(tokens, onnxruntime_greedy(out / "model.onnx", prompts()))) >= 5
    tokenizer = og.Tokenizer(og.Model(str(out)))  # read from the output folder
    assert tokenizer.decode(np.array(tokens[0], np.int32)) == "".join(f"w{t}" for t in tokens[0])
    assert "copied 4 other files" in r.output


def test_shrink_of_a_genai_folder_computes_the_same_tokens(genai_export, tmp_path):
    pytest.importorskip("onnxruntime_genai")
    out = tmp_path / "shrunk"
    r = invoke("shrink", genai_export, out)
    assert r.exit_code == 0, r.output
    assert (out / "genai_config.json").is_file() and (out / "tokenizer.json").is_file()
    assert genai_greedy(out, prompts()[:2]) == genai_greedy(genai_export, prompts()[:2])


def _optimum_like(root: Path) -> Path:
    """Two models at the top, one in onnx/, configs beside them, a hidden folder to leave out."""
    folder = root / "optimum"
    (folder / "onnx").mkdir(parents=True)
    onnx.save(builders.quant_cases(), str(folder / "encoder_model.onnx"))
    onnx.save(builders.duplicate_initializers(n_copies=3, size=80), str(folder / "decoder_model.onnx"))
    onnx.save(builders.quant_cases(), str(folder / "onnx" / "model.onnx"))
    (folder / "config.json").write_text('{"model_type": "toy"}')
    (folder / "generation_config.json").write_text("{}")
    (folder / "onnx" / "README.md").write_text("weights: random\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return folder


def test_an_optimum_like_folder_gets_every_model_quantized_and_every_file_copied(tmp_path):
    src = _optimum_like(tmp_path)
    out = tmp_path / "out"
    r = invoke("quant", src, out, "--json", "--min-elements", "1024")
    assert r.exit_code == 0, r.output
    reports = json.loads(r.output)
    assert sorted(Path(x["output"]).relative_to(out).as_posix() for x in reports) == \
        ["decoder_model.onnx", "encoder_model.onnx", "onnx/model.onnx"]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["config.json", "decoder_model.onnx", "encoder_model.onnx", "generation_config.json",
                     "onnx/README.md", "onnx/model.onnx"]
    assert onnx.load(str(out / "encoder_model.onnx")).ByteSize() < onnx.load(str(src / "encoder_model.onnx")).ByteSize()


def test_the_api_takes_a_folder_too(tmp_path):
    src = _optimum_like(tmp_path)
    reports = quant_folder(src, tmp_path / "api_out", min_elements=1024)
    assert len(reports) == 3 and all(r.verification is not None for r in reports)


def test_a_failure_leaves_no_output_folder(tmp_path):
    src = _optimum_like(tmp_path)
    with pytest.raises(VerificationError):
        quant_folder(src, tmp_path / "out", min_elements=1024, max_error=1e-12)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["optimum"]  # nor a staging folder


def test_a_non_empty_output_folder_is_refused(tmp_path):
    src = _optimum_like(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    r = invoke("quant", src, out)
    assert r.exit_code == 2 and "output folder is not empty" in r.output, r.output
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    with pytest.raises(OutputError, match="inside the input folder"):
        quant_folder(src, src / "sub")


def test_a_genai_config_naming_a_missing_model_is_one_line(genai_export, tmp_path):
    src = tmp_path / "broken"
    shutil.copytree(genai_export, src)
    config = json.loads((src / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = "missing.onnx"
    (src / "genai_config.json").write_text(json.dumps(config))
    r = invoke("quant", src, tmp_path / "out")
    assert r.exit_code == 2 and "names missing.onnx, which is not in" in r.output, r.output
    assert not (tmp_path / "out").exists()


def test_a_folder_without_models_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    r = invoke("quant", tmp_path / "empty", tmp_path / "out")
    assert r.exit_code == 2 and "no .onnx file" in r.output, r.output


def test_dry_run_on_a_folder_shows_each_models_plan(tmp_path):
    src = _optimum_like(tmp_path)
    r = invoke("quant", src, "--dry-run", "--json", "--min-elements", "1024")
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(r.output)) == ["decoder_model.onnx", "encoder_model.onnx", "onnx/model.onnx"]
    assert not np.any([p.name == "out" for p in tmp_path.iterdir()])


def test_a_file_name_as_the_output_of_a_folder_is_refused(tmp_path):
    src = _optimum_like(tmp_path)
    r = invoke("quant", src, tmp_path / "model.onnx")
    assert r.exit_code == 2 and "the output is a folder too" in r.output, r.output
    assert not (tmp_path / "model.onnx").exists()
