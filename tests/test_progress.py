"""Progress bars: on a terminal a long run shows one on stderr; through a pipe, with -q or with
--json there is none. The terminal is a real pseudo-terminal (pty)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import onnx
import pytest

import builders


def _quant_under(tmp_path, terminal: bool, *extra: str) -> str:
    src = tmp_path / "in.onnx"
    onnx.save(builders.quant_cases(), str(src))
    cmd = [sys.executable, "-m", "onnxsurgery", *[a for a in extra if a == "-q"], "quant", str(src),
           str(tmp_path / "q.onnx"), "--min-elements", "64", *[a for a in extra if a != "-q"]]
    env = {**os.environ, "ONNXSURGERY_PROGRESS_DELAY": "0", "COLUMNS": "100"}
    if not terminal:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        return r.stderr
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait() == 0
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_sees_a_progress_bar(tmp_path):
    stderr = _quant_under(tmp_path, terminal=True)
    assert "quantize" in stderr and "weight" in stderr and "%|" in stderr, stderr


@pytest.mark.parametrize("extra", [(), ("-q",), ("--json",)])
def test_no_bar_through_a_pipe_with_quiet_or_json(tmp_path, extra):
    stderr = _quant_under(tmp_path, len(extra) > 0, *extra)
    assert "%|" not in stderr and "quantize:" not in stderr, stderr
