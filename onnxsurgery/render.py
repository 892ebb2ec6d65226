"""Plain-text tables for the CLI. Pure functions of the reports; no I/O."""

from __future__ import annotations

from .units import human_bytes

# report.RunReport is named in annotations without an import: report.py imports this module to
# print itself (RunReport.__str__), and the layers allow no cycle (tests/test_layers.py).


def _table(headers: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    fmt = lambda r: indent + "  ".join(str(c).rjust(w) if i < len(r) - 1 else str(c)  # noqa: E731
                                       for i, (c, w) in enumerate(zip(r, widths)))
    return [fmt(headers)] + [fmt(r) for r in rows]


def _pct(before: int, after: int) -> str:
    return f"{(after - before) / before * 100:+.1f}%" if before else "n/a"


def render_run(report: "RunReport", top: int = 5) -> str:  # noqa: F821
    lines = [f"{report.input} -> {report.output or '(not written)'}"]
    lines.append(
        f"  size: {human_bytes(report.bytes_before)} -> {human_bytes(report.bytes_after)} "
        f"({_pct(report.bytes_before, report.bytes_after)})"
    )
    for p in report.passes:
        quiet = p.name in ("half_width", "merge_reshaped", "cast_weights")  # their skips: in --json, -v
        if not p.changed and (not p.skipped or quiet) and p.name != "quantize":
            continue  # a pass that found nothing to do (merging in a model without copies)
        if p.name == "merge_duplicates":
            d = p.details
            lines.append(f"  merged {d['constants_merged']} constants in {d['groups']} groups, "
                         f"saving {human_bytes(p.bytes_saved)}")
            groups = d["largest_groups"][:top]
            if groups:
                rows = [[str(g["count"]), human_bytes(g["bytes_each"]), human_bytes(g["bytes_saved"]),
                         f"{g['dtype']}{g['shape']}", g["kept"]]
                        for g in groups]
                lines += _table(["copies", "each", "saved", "tensor", "kept as"], rows, "    ")
        elif p.name == "merge_transposed":
            lines.append(f"  transposed copies merged: {p.changed}, saving "
                         f"{human_bytes(p.bytes_saved)}; cost: {p.details['cost']}")
        elif p.name == "shape_only":
            lines.append(f"  {p.changed} constants read only by Shape stored as their shape, saving "
                         f"{human_bytes(p.bytes_saved)}")
        elif p.name == "merge_reshaped":
            lines.append(f"  merged {p.changed} constants equal to another under another shape ("
                         f"{p.details['reshapes']} Reshape nodes, folded by onnxruntime at session start), saving "
                         f"{human_bytes(p.bytes_saved)}")
        elif p.name == "externalize":
            d = p.details
            lines.append(f"  moved {p.changed} constants ({human_bytes(p.bytes_saved)}) to {d.get('npy_dir')}")
            lines.append(f"  manifest: {d.get('manifest')}")
            if p.skipped:
                lines.append(f"  left {len(p.skipped)} selected constants in place (see --json for why)")
        elif p.name == "quantize":
            d = p.details
            schemes = ", ".join(f"{n} x {k}" for k, n in d["schemes"].items()) or "none"
            quantized = p.changed - d.get("rewritten", 0)  # rewritten: said in the notes (selection_notes)
            if quantized or not d.get("rewritten"):
                lines.append(f"  quantized {quantized} weights ({schemes}), saving {human_bytes(p.bytes_saved)}")
            for e in d["largest_errors"][:top]:
                lines.append(f"    weight error {e['rel_l2_error']:.2e} (relative L2)  {e['name']} {e['shape']}")
            if p.skipped:
                lines.append(f"  left {len(p.skipped)} float weights as they were (see --json for why)")
        elif p.name == "constants_to_initializers":
            lines.append(f"  made {p.changed} Constant-node tensors initializers (for quantize_dynamic)")
        elif p.name == "embed":
            lines.append(f"  embedded {p.changed} arrays as initializers")
        elif p.name == "half_width":
            kinds = " and ".join(f"{n} as {k}" for k, n in p.details["as"].items() if n)
            lines.append(f"  stored {p.changed} float32 constants in 2 bytes ({kinds}; exact, a Cast "
                         f"after each), saving {human_bytes(p.bytes_saved)}")
        elif p.name == "cast_weights":
            removed = sum(s["casts_removed"] for s in p.details["stored"])
            lines.append(f"  stored {p.changed} float constants as the narrower type every reader Casts them to "
                         f"(exact; {removed} Casts removed), saving {human_bytes(p.bytes_saved)}")
        elif p.name == "narrow":
            lines.append(f"  narrowed {p.changed} constants, saving {human_bytes(p.bytes_saved)}; "
                         f"left {len(p.skipped)} as they were")
        else:
            lines.append(f"  {p.name}: {p.changed} changed, saving {human_bytes(p.bytes_saved)}")
    for note in report.notes:
        lines.append(f"  note: {note}")
    if report.target_check is not None:  # the findings themselves are warnings, on stderr
        found = len(report.target_check["refused"])
        lines.append(f"  checked against {report.target_check['target']}'s ONNX parser (onnx-tensorrt's operator "
                     f"list): {found or 'nothing'} it would refuse")
    v = report.verification
    if v is not None and report.command == "shrink":
        if v.get("exact"):
            lines.append(f"  verified: outputs bit-identical in onnxruntime ({_described(v)})")
        else:
            lines.append(f"  verified: max abs error {v['max_abs_error']:.3g}, "
                         f"relative L2 error {v['rel_l2_error']:.3g}")
    return "\n".join(lines)


def render_info(path: str, data: dict, top: int = 20) -> str:
    limit = (lambda xs: xs[:top]) if top else (lambda xs: xs)
    total, weights = data["model_bytes"], data["weight_bytes"]
    lines = [
        f"{path}: {human_bytes(total)}, {data['constants']} constants, "
        f"{data['subgraphs']} subgraphs",
        f"  weights: {human_bytes(weights)} ({weights / total * 100 if total else 0:.1f}%), "
        f"everything else: {human_bytes(data['other_bytes'])}",
        "  by dtype: " + ", ".join(f"{k} {human_bytes(v)}" for k, v in data["bytes_by_dtype"].items()),
        "",
        f"Largest constants ({len(data['large_constants'])} of at least the size asked):",
    ]
    rows = [[human_bytes(c["bytes"]), c["dtype"], str(c["shape"]),
             c["location"] + (" (sparse: values and indices)" if c.get("sparse") else ""), c["name"]]
            for c in limit(data["large_constants"])]
    lines += _table(["bytes", "dtype", "shape", "where", "name"], rows) if rows else ["  none"]
    groups = data["duplicate_groups"]
    lines += ["", f"Duplicate groups: {len(groups)}"]
    rows = [[str(g["count"]), human_bytes(g["bytes_each"]), human_bytes(g["bytes_saved"]), g["kept"]]
            for g in limit(groups)]
    if rows:
        lines += _table(["copies", "each", "saved", "first"], rows)
    lines += ["", "What each method would save (quant merges first; its figures are estimated from shapes):"]
    for method, saved in data["savings"].items():
        lines.append(f"  {method:13s} {human_bytes(saved):>9s} ({saved / total * 100 if total else 0:.1f}%)")
        parts = data.get("shrink_parts", {}) if method == "shrink" else {}
        for part, what in (("read only by Shape", "constants read only by Shape, stored as their shape"),
                           ("reshaped copies", "copies under another shape, merged through a Reshape"),
                           ("stored as their Cast", "constants stored as the narrower type their Casts give"),
                           ("16-bit storage", "float32 stored exactly in 16 bits")):
            if parts.get(part):  # like a pass that found nothing, not shown when it saves nothing
                lines.append(f"    of which {what}: {human_bytes(parts[part])}")
    return "\n".join(lines)


def render_report_summary(model: str, page: str, data: dict) -> str:
    """What `report` prints beside the page it writes: one line per method."""
    lines = [f"{model} -> {page}"]
    for row in data["methods"]:
        if row["failed"]:
            lines.append(f"  {row['key']:15s} failed: {row['failed']}")
            continue
        error = "identical" if row["exact"] else f"rel L2 {row['rel_l2_error']:.2e}"
        lines.append(f"  {row['key']:15s} {human_bytes(row['bytes']):>9s}  {error}")
    return "\n".join(lines)


# What a check on generated inputs cannot tell (issue 49: an int4 speech-quality net showed 0.092
# on generated inputs, under the warning line, and moved its score 3.10 -> 2.75 of 5 on real speech)
GENERATED_CANNOT_TELL = ("    generated inputs show that it runs and how far outputs move on random data, not how "
                         "its results on real data change (a score, a class, a token): --inputs real.npz measures that")


def render_verification(v: dict) -> str:
    if v.get("copy"):
        return (f"  verification ({v['runtime']}): the output is the input byte for byte; it loads, and computes "
                "what the input computes without being run")
    lines = [f"  verification ({_described(v)}; {v['runtime']}):"]
    for name, o in v["outputs"].items():
        agree = f"  argmax agreement {o['argmax_agreement'] * 100:.2f}%" if "argmax_agreement" in o else ""
        if "ranked" in o:  # running/ranked.py
            agree += f"  (top {o['ranked']} by TopK: rows compared as a set)"
        aside = "" if o.get("headline", True) else "  (not in the headline)"
        if o.get("compared") is False:  # running/output_errors.py's hollow_outputs
            lines.append(f"    {name}: not compared{aside}")
            continue
        if "differing" in o:  # integers or text: the share of values that differ (output_errors.py)
            share = f"{o['differing'] * 100:.3g}% of its values differ" if o["differing"] else "every value equal"
            lines.append(f"    {name}: {share}{agree}{aside}")
            continue
        lines.append(f"    {name}: max abs error {o['max_abs_error']:.3g}  "
                     f"relative L2 {o['rel_l2_error']:.3g}{agree}{aside}")
    for name in v.get("not_compared", ()):  # an error of 0 there would say nothing: NaN == NaN
        lines.append(f"    warning: output {name} was not compared: the original's values are NaN, infinite or "
                     f"zero (repeated by the result) at every position of the {_described(v)}, so no error is "
                     "measured there")
    if v.get("generated") and not v.get("exact"):
        lines.append(GENERATED_CANNOT_TELL)
    return "\n".join(lines)


def _described(v: dict) -> str:
    """How many samples a verification ran, and whether they were generated (errors on real
    inputs may differ: the user should know)."""
    n = v["samples"]
    return f"{n} {'generated ' if v.get('generated') else ''}sample{'s' * (n != 1)}"
