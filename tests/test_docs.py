"""The docs stay true: docs/cli.md is what the commands' --help says now."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current():
    spec = importlib.util.spec_from_file_location("make_cli_reference", ROOT / "docs" / "make_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == module.reference(), "docs/cli.md is stale: run python docs/make_cli_reference.py"
    assert "## onnxsurgery quant" in committed and "--keep-quantized" in committed
