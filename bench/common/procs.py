"""Processes the benchmarks start on loopback: a free port, the environment that runs another
checkout's ``cachekit``, a server process held until it answers and stopped afterwards, and a
process's resident memory."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(src: str | None) -> dict[str, str]:
    """This environment, offline, with the checkout ``src`` (if any) first on the path."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def wait_healthy(url: str, seconds: float) -> None:
    """Until ``url`` answers 200; RuntimeError after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not start")


@contextmanager
def serving(cmd: list[str], ready_url: str, src: str | None = None) -> Iterator[int]:
    """``cmd`` run from the checkout ``src`` (``python -m`` puts the working directory first on
    the path; default: this one) until ``ready_url`` answers; its pid for the block, then SIGTERM
    (SIGKILL after 20 s). Its output goes to this process's."""
    proc = subprocess.Popen(cmd, env=env_for(src), cwd=src or str(ROOT), stdout=subprocess.DEVNULL)
    try:
        wait_healthy(ready_url, 120.0)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(20.0)
        except subprocess.TimeoutExpired:
            print(f"{cmd[2:4]} did not stop within 20 s of SIGTERM: killed", flush=True)
            proc.kill()
            proc.wait(10.0)


def rss_mib(pid: int) -> float:
    """The resident memory of process ``pid`` (VmRSS), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")
