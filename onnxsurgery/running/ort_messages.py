"""onnxruntime's errors in a user's words: the first line, without the prefix that repeats the file's
name or the C++ check's source location; an opset or operator this onnxruntime does not run said
plainly (sessions.py, runs.py)."""

from __future__ import annotations

import re


def first_line(error: BaseException) -> str:
    """onnxruntime's message, its first line, without the prefix that repeats the file's name
    ("[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:") or the C++ check's source
    location; an opset or an operator this onnxruntime does not run said in our words."""
    import onnxruntime as ort

    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    line = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : (Load model from .* failed:)?", "", line).strip() or line
    newer = re.search(r"Opset (\d+) is under development.*support for domain (\S+) is till opset (\d+)", line)
    if newer:
        return (f"the model is {newer[2]} opset {newer[1]}, newer than onnxruntime {ort.__version__} runs (up to "
                f"opset {newer[3]}): use a newer onnxruntime")
    missing = re.search(r"Could not find an implementation for (\S+)\((\d+)\) node with name '([^']*)'", line)
    if missing:
        return (f"onnxruntime {ort.__version__} has no CPU kernel for {missing[1]} at opset {missing[2]} "
                f"(node '{missing[3]}')")
    return re.sub(r"^/\S+:\d+ .*?\) (?=[A-Z])", "", line)  # a C++ check's file, line and function
