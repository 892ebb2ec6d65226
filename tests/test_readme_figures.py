"""The README's accuracy claims quote docs/benchmarks.md, never figures of their own (issue 55:
its table had gone stale, quoting defaults two changes old). Every decimal figure in the
README's accuracy table must appear in the accuracy section of docs/benchmarks.md, and that
section must say when its run was made."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![\d.])")  # 0.0184, 24.3, 0.71 (in 0.71x)


def section(text: str, heading: str) -> str:
    """The text under `heading` (a '## ' line) up to the next '## ' heading."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def readme_table_rows() -> list[str]:
    part = section((ROOT / "README.md").read_text(), "How accurate, against the alternatives")
    return [line for line in part.splitlines() if line.startswith("| ") and not line.startswith("| ---")][1:]


def figures(text: str) -> set[str]:
    return set(FIGURE.findall(text))


def test_the_readme_quotes_only_figures_the_benchmark_file_holds():
    bench = section((ROOT / "docs" / "benchmarks.md").read_text(), "Accuracy against the alternatives")
    held = figures(bench)
    rows = readme_table_rows()
    assert rows, "the README's accuracy table is missing"
    quoted = figures("\n".join(rows))
    assert quoted, "the README's accuracy table quotes no figures"
    missing = sorted(quoted - held)
    assert not missing, f"README figures not in docs/benchmarks.md's accuracy section: {missing}"


def test_the_benchmark_section_is_dated():
    bench = section((ROOT / "docs" / "benchmarks.md").read_text(), "Accuracy against the alternatives")
    assert re.search(r"20\d\d-\d\d-\d\d", bench)


def test_the_figure_pattern_finds_what_a_table_quotes():
    assert figures("| ddddocr | 0.0087, 13.8 MB | shrink-ray 0.0123 (2.10x memory) |") == {"0.0087", "13.8", "0.0123",
                                                                                        "2.10"}
