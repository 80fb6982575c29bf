"""What the benchmark scripts share: evaluation data, processes, servers, generated sets."""
