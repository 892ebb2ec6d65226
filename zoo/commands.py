"""The commands the zoo runs on each model and variant (zoo/run.py): how each is judged, which
run in which mode, and the argv of each."""

from __future__ import annotations

from pathlib import Path

# name: (args after the command word, how its output is judged, min decisions kept, time class)
COMMANDS = {
    "info": ("info", None, None),
    "check": ("check", None, None),
    "shrink --verify": ("shrink", "exact", None),
    "quant": ("quant", 0.9, "int8"),
    "quant --inputs": ("quant", 0.9, "inputs"),
    "quant --dtype int4": ("quant", 0.75, "int4"),
    "quant --dtype int4 --inputs": ("quant", 0.75, "int4 inputs"),
    "quant --target tensorrt": ("quant", 0.9, None),
    "quant --dry-run --json": ("quant", None, None),
    "quant --dry-run --json --inputs": ("quant", None, None),
    "npy": ("npy", None, None),
    "embed": ("embed", "exact", None),
    "compare": ("compare", None, None),
    "report": ("report", None, None),
}
FULL = list(COMMANDS)
# the peers' kind (zoo/peers.py) that does each quant kind's job (invariants 4 and 9)
PEER_KIND = {"int8": "int8", "inputs": "int8", "int4": "int4", "int4 inputs": "int4"}
# each command measured on --inputs, and its data-free default (invariant 5)
MEASURED_AGAINST = {"quant --inputs": "quant", "quant --dtype int4 --inputs": "quant --dtype int4"}
# int4 in every storage: it raises an old opset, and the upgrade is checked on a stub beside the payloads (a link)
STORAGE_CMDS = ["info", "check", "quant", "quant --dtype int4", "quant --dry-run --json",
                "quant --dry-run --json --inputs"]
OTHER_CMDS = ["info", "quant", "quant --inputs"]
QUICK_CMDS = ["info", "check", "shrink --verify", "quant", "quant --inputs", "quant --dtype int4",
              "quant --dtype int4 --inputs",
              "quant --dry-run --json", "npy", "embed", "compare"]
HEAVY_CMDS = ["info", "check", "shrink --verify", "quant", "quant --inputs", "quant --dtype int4",
              "quant --dtype int4 --inputs",
              "quant --target tensorrt", "quant --dry-run --json", "quant --dry-run --json --inputs", "npy", "embed"]
HEAVY_STORAGE = ["info", "quant", "quant --dry-run --json", "quant --dry-run --json --inputs"]
QUICK_STORAGE = ["info", "shrink --verify", "quant", "quant --dtype int4", "quant --dry-run --json",
                 "quant --dry-run --json --inputs"]


def argv_for(cmd: str, src: Path, out: Path, npy_out: Path, tune: Path, report: Path) -> list:
    word = cmd.split()[0]
    if cmd == "info":  # --json: invariant 13 reads its predicted savings (zoo/predicted.py)
        return ["info", src, "--json"]
    if cmd == "check":
        return ["check", src]
    if cmd == "shrink --verify":
        return ["shrink", src, out, "--verify", "--inputs", report]
    if cmd == "quant":
        return ["quant", src, out]
    if cmd == "quant --inputs":
        return ["quant", src, out, "--inputs", tune, "--json"]  # --json: invariant 8
    if cmd == "quant --dtype int4":
        return ["quant", src, out, "--dtype", "int4"]
    if cmd == "quant --dtype int4 --inputs":
        return ["quant", src, out, "--dtype", "int4", "--inputs", tune, "--json"]
    if cmd == "quant --target tensorrt":
        return ["quant", src, out, "--target", "tensorrt"]
    if cmd == "quant --dry-run --json":
        return ["quant", src, out, "--dry-run", "--json"]
    if cmd == "quant --dry-run --json --inputs":
        return ["quant", src, out, "--dry-run", "--json", "--inputs", tune]
    if cmd == "npy":
        return ["npy", src, npy_out]
    if cmd == "embed":
        return ["embed", npy_out, out]
    if cmd == "compare":
        return ["compare", src, npy_out, "--inputs", report]
    if cmd == "report":
        return ["report", src, "-o", out.with_suffix(".html"), "--inputs", tune]
    raise ValueError(word)


def out_path(work: Path, variant: str, cmd: str) -> Path:
    slug = cmd.replace("--", "").replace(" ", "_").replace("__", "_")
    return work / f"{variant}.{slug}" if variant == "folder" and cmd.split()[0] in ("shrink", "quant") \
        else work / f"{variant}.{slug}.onnx"
