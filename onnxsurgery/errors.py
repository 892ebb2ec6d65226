"""Errors the library raises. The CLI turns each into one line on stderr and exit code 2."""


class OnnxSurgeryError(Exception):
    """Base class: the message is meant for the user, and says what to do."""


class InputError(OnnxSurgeryError):
    """The input model is missing, unreadable or not ONNX."""


class OutputError(OnnxSurgeryError):
    """The output cannot be written where asked."""


class VerificationError(OnnxSurgeryError):
    """The result does not compute what the input computed, within the allowed error."""


class UnsupportedModelError(OnnxSurgeryError):
    """The model uses something this tool cannot process safely."""


class UnsafeLocationError(InputError):
    """A file the model names (an external data location, an npy manifest's file) is given by
    an absolute path, lies outside the model's folder once `..` and symlinks are followed, or is
    not a regular file. onnx and onnxruntime refuse these too."""


class OptionError(OnnxSurgeryError, ValueError):
    """Options that contradict each other, or a value out of range. Also a ValueError, for
    callers of the Python API that catch that."""


class PlanError(OptionError):
    """A quantization plan (`quant --plan FILE`) that is malformed, names a weight the model
    lacks, or asks for something the weight cannot take."""


def from_os_error(e: OSError, output: object = None) -> OnnxSurgeryError:
    """An OSError raised while a command reads or writes (a path through a file, a folder it may
    not write, a full disk) as the error the library promises: OutputError when the file it names
    is the output or lies beside it (`output`: the output path), else InputError. One line, in
    the operating system's own words, naming the file."""
    from pathlib import Path

    filename = getattr(e, "filename", None)
    why = e.strerror or str(e) or type(e).__name__
    writing = filename is None
    if output is not None and filename is not None:
        try:
            out = Path(output).absolute()
            name = Path(filename).absolute()
            writing = name == out or name.is_relative_to(out.parent) or name.is_relative_to(out)
        except (OSError, ValueError, TypeError):
            writing = True
    if writing:
        target = output if output is not None else filename
        where = f" ({filename})" if filename is not None and str(filename) != str(target) else ""
        return OutputError(f"cannot write {target}: {why}{where}")
    return InputError(f"cannot read {filename}: {why}")


def runtime_message(e: BaseException, limit: int = 600) -> str:
    """onnxruntime's message on one line, its tail kept: the part that says what to change often
    follows a line break ("Got invalid dimensions for input: x for the following indices" /
    " index: 2 Got: 48 Expected: 224"). Lines are joined, runs of spaces squeezed, and a message
    longer than `limit` characters keeps its start and its end."""
    text = " ".join(" ".join(line.split()) for line in str(e).splitlines() if line.strip())
    if len(text) > limit:
        text = text[: limit // 2] + " ... " + text[-limit // 2:]
    return text
