"""The docs stay true: docs/cli.md is what the commands' --help says now, and the code blocks
of the README, of docs/*.md and of the examples' READMEs run.

Per page, its blocks run in order in one fresh folder laid out as a checkout (with `samples`
linked in, so a block may build a sample model): the README's and docs' blocks at its root, as
a newcomer runs them from the repository root; each example's in `build/<example>/`, as
examples/README.md tells a reader to run them, and nothing may be written outside that folder
(issue 49: the examples left models, `plan.json` and `report.html` in the repository's root).
- `console` blocks: each `$ ` line runs (`onnxsurgery ...` through this Python, `python ...` as
  this Python; a final `> FILE` writes its output to FILE), must exit 0, and must print the
  lines shown below it, with every number masked (figures such as errors depend on the CPU; the
  words and the layout must not change), except
  the lines of the sample builders (`python .../samples/...`), which are seeded and print their
  sizes exactly;
- `python` blocks are executed;
- `sh` blocks (make and pip lines, which set up the machine) and `text` blocks are not run, and
  no other language is allowed, so that a block cannot go untested by accident.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("**/README.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
NOT_RUN = {"sh": re.compile(r"^(make|pip) "), "text": None}


def test_cli_reference_is_current():
    spec = importlib.util.spec_from_file_location("make_cli_reference", ROOT / "docs" / "make_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == module.reference(), "docs/cli.md is stale: run python docs/make_cli_reference.py"
    assert "## onnxsurgery quant" in committed and "--keep-quantized" in committed


def _blocks(page: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(page.read_text(encoding="utf-8"))]


def _masked(text: str) -> list[str]:
    return [" ".join(NUMBER.sub("#", line).split()) for line in text.strip("\n").splitlines()]


def _run_console(block: str, cwd: Path) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            assert commands, f"output before any command: {line!r}"
            commands[-1][1].append(line)
    for command, expected in commands:
        args = shlex.split(command)
        into = None
        if len(args) > 2 and args[-2] == ">":  # `... --dry-run --json > plan.json`: stdout to that file
            args, into = args[:-2], cwd / args[-1]
        exact = args[0] == "python" and len(args) > 1 and "samples/" in args[1]
        if args[0] == "onnxsurgery":
            args = [sys.executable, "-m", "onnxsurgery", *args[1:]]
        elif args[0] == "python":
            args = [sys.executable, *args[1:]]
        else:
            pytest.fail(f"a console block may run onnxsurgery and python only: {command}")
        proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "100"})
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
        if into is not None:
            into.write_text(proc.stdout)
            assert not expected, f"{command}: its output goes to {into.name}, none can be shown"
            continue
        if exact:
            assert proc.stdout.strip("\n").splitlines() == expected, f"{command} now prints:\n{proc.stdout}"
        assert _masked(proc.stdout) == _masked("\n".join(expected)), f"{command} now prints:\n{proc.stdout}"


def _folder_for(page: Path, root: Path) -> Path:
    """Where a page's blocks run inside the checkout-like `root` (module doc)."""
    if page.parent.parent == ROOT / "examples":
        folder = root / "build" / page.parent.name
        folder.mkdir(parents=True)
        return folder
    return root


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.name != "__pycache__"}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_code_blocks_run(page, tmp_path):
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    folder = _folder_for(page, tmp_path)
    for language, code in _blocks(page):
        if language == "console":
            _run_console(code, folder)
        elif language == "python":
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                exec(compile(code, f"{page.name} python block", "exec"), {"__name__": "__doc_block__"})
            finally:
                os.chdir(cwd)
        elif language == "sh":
            for line in code.splitlines():
                assert NOT_RUN["sh"].match(line), f"{page.name}: an sh block may hold make and pip lines only: {line}"
        else:
            assert language in NOT_RUN, f"{page.name}: a ```{language} block would go untested"
    if folder != tmp_path:  # an example writes into its own folder only
        outside = {f for f in _files(tmp_path) if not (tmp_path / f).is_relative_to(folder)}
        assert outside == {"samples", "build"}, f"{page.name} wrote outside its folder: {sorted(outside)}"


def test_the_examples_say_how_to_run_them_in_a_fresh_folder():
    """examples/README.md says where to run them, and each example builds its sample model from
    there (`../../samples/...`, the folder test_code_blocks_run gives it)."""
    index = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    assert "mkdir -p build/" in index and "../../samples/make_encoder.py" in index
    for page in sorted((ROOT / "examples").glob("*/README.md")):
        builders = re.findall(r"^\$ python (\S+)", page.read_text(encoding="utf-8"), re.M)
        assert builders and all(b.startswith("../../samples/") for b in builders), page


def test_the_readme_is_a_short_guide_that_links_its_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 100 <= len(readme.splitlines()) <= 190  # 160 until set-up's cost and the round trips (issue 57)
    assert "make demo" in readme and "make test" in readme and "pip install" in readme
    for link in re.findall(r"\]\(((?:docs|bench|examples)/[^)#]+|CHANGELOG\.md)", readme):
        assert (ROOT / link).exists(), link
    assert any(lang == "console" for lang, _ in _blocks(ROOT / "README.md"))
