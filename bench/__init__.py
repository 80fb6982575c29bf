"""The benchmarks: scripts by area, run from the repository's root as modules
(``python -m bench.semantic.latency --help``). See ``bench/README.md``."""
