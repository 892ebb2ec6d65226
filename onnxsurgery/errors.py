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
