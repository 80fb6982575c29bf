"""The embedder: latency by backend and threads, the ONNX graph, long texts, install sizes."""
