"""The semantic tier: lookup latency, throughput, the index, the GPU, the tuned embedder."""
