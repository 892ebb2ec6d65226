"""Default values the command line shows in --help, as plain constants: the CLI reads them here
without importing the modules that use them (onnx, onnxruntime, the quantizers), so that
`onnxsurgery --help` stays quick. tests/test_layers.py checks that they match those modules."""

# passes/merge_constants.py: shrink and npy leave constants with fewer elements alone
MERGE_MIN_ELEMENTS = 16
# quantization/options.py: quant leaves float constants with fewer elements alone, and its block size
QUANT_MIN_ELEMENTS = 4096
QUANT_BLOCK_SIZE = 32
# quantization/options.py: under --target tensorrt, int4 blocks of 128 (TensorRT takes 64 and 128)
TENSORRT_BLOCK_SIZE = 128
# evaluate.py: the methods `report` makes and measures, in its order
METHOD_KEYS = ("shrink", "int8", "int4", "keep-quantized", "fp16", "levels")
