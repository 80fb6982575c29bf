"""The settings of ``cachekit tune`` (:class:`TuneConfig`): importable without numpy or torch,
so the command line can show its defaults."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TuneConfig"]


@dataclass(frozen=True)
class TuneConfig:
    """Settings of one tune. ``steps`` of ``batch_size`` duplicates (with their negatives) plus
    ``batch_size`` labelled pairs; ``rank``/``alpha``: the adapter's size and scale."""

    steps: int = 300
    batch_size: int = 32
    learning_rate: float = 3e-4
    warmup: float = 0.1
    rank: int = 16
    alpha: int = 32
    max_seq_length: int = 64
    held_back: float = 0.2
    target_precision: float = 0.80
    seed: int = 0
    checkpoint_every: int = 25
    max_pairs: int | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "rank", "alpha", "max_seq_length", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0 < self.learning_rate < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {self.learning_rate!r}")
        if not 0 <= self.warmup < 1:
            raise ValueError(f"warmup must be in [0, 1), got {self.warmup!r}")
        if not 0 < self.target_precision < 1:
            raise ValueError(f"target_precision must be in (0, 1), got {self.target_precision!r}")
