"""Other formats: Hugging Face checkpoints as data (`hf_keys`: key maps and config fields) and the conversion
both ways (`convert`), and ONNX export checked with onnxruntime (`onnx`)."""
