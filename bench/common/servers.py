"""Benchmarks start their own redis-server (never one they did not start), with the same helper
the tests use."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from redis_servers import RedisServer

__all__ = ["RedisServer"]
