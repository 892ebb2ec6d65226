"""Damaged files: a seeded mutator changes random bytes of valid models, and every command runs
on each copy. The only acceptable outcomes are success (exit 0, nothing on stderr) or one clean
line on stderr with exit 2; an internal error (exit 3), a traceback, a numpy or onnxruntime
warning, or a changed input file fails the test."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import builders
from onnxsurgery.cli import main

COPIES = 60  # per seed model; each runs through every command (300 found nothing more)


def _damaged(original: bytes, seed: int) -> bytes:
    """1-4 random bytes changed (set, flipped or zeroed), or the file cut short."""
    rng = np.random.default_rng(seed)
    data = bytearray(original)
    if rng.random() < 0.15:
        return bytes(data[: int(rng.integers(1, len(data)))])
    for _ in range(int(rng.integers(1, 5))):
        i = int(rng.integers(0, len(data)))
        data[i] = [int(rng.integers(0, 256)), data[i] ^ 0xFF, 0][int(rng.integers(0, 3))]
    return bytes(data)


@pytest.mark.parametrize("seed_model", ["quant_cases", "conv_model", "if_and_loop_subgraphs"])
def test_damaged_models_give_exit_0_or_one_clean_line(tmp_path, seed_model):
    original = getattr(builders, seed_model)().SerializeToString()
    commands = [["info", "{src}"], ["shrink", "{src}", "{out}"], ["quant", "{src}", "{out}", "--no-verify"],
                ["quant", "{src}", "{out}", "--no-verify", "--min-elements", "1"], ["npy", "{src}", "{out}"]]
    outcomes = {0: 0, 2: 0}
    for copy in range(COPIES):
        damaged = _damaged(original, 1000 * copy + len(seed_model))
        src = tmp_path / f"d{copy}.onnx"
        src.write_bytes(damaged)
        for command in commands:
            out = tmp_path / f"o{copy}.onnx"
            out.unlink(missing_ok=True)
            args = [a.format(src=src, out=out) for a in command]
            result = CliRunner().invoke(main, args)
            what = f"{' '.join(command)} on copy {copy}: exit {result.exit_code}\n{result.output}\n{result.stderr}"
            assert result.exit_code in (0, 2), what
            if result.exit_code == 2:
                lines = result.stderr.strip().splitlines()
                assert len(lines) == 1 and lines[0].startswith("onnxsurgery: error:"), what
                assert not out.exists(), what
            else:
                assert result.stderr == "", what
            assert src.read_bytes() == damaged, what  # the input is never changed
            outcomes[result.exit_code] += 1
    assert outcomes[2] > 0  # the mutator does damage files (most copies are refused)
