"""Where a model will run, and what that place takes (tensorrt.py: onnx-tensorrt's operator list)."""
