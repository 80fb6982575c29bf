"""The proxy's own cost of an exact hit, in process: the ASGI app of ``cachekit serve`` (no
server, no socket, no upstream: the answer is stored first) called for one stored chat request
again and again, microseconds per request, median of the repetitions. What ``load`` measures
through uvicorn and wrk, without the server's and the network's share, so that a change to the
hit path shows as a ratio between two checkouts run one after the other::

    python -m bench.proxy.hit_path --reps 7 --n 3000
    python -m bench.proxy.hit_path --dashboard 0.5   # the dashboard's data built every 0.5 s
    git worktree add /tmp/before <commit>
    (cd /tmp/before && PYTHONPATH=/tmp/before python -P -m bench.proxy.hit_path)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from typing import Any

from cachekit.llm import prepare
from cachekit.proxy.app import create_app
from cachekit.proxy.config import ProxyConfig

CHAT = "/v1/chat/completions"
BODY = json.dumps(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello there"}]}
).encode()
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi " * 20},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25},
}
HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(BODY)).encode()),
    (b"authorization", b"Bearer sk-bench"),
]


def _scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": CHAT,
        "raw_path": CHAT.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": HEADERS,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }


def _poll_dashboard(proxy: Any, every: float, stop: threading.Event) -> None:
    """What an open ``/dashboard`` costs the server: its data built on another thread, as the
    route builds it (``asyncio.to_thread``), every ``every`` seconds."""
    from cachekit.proxy.ops.dashboard import collect

    while not stop.wait(every):
        collect(proxy.metrics)


async def run(reps: int, n: int, dashboard: float | None = None) -> list[float]:
    """Microseconds per exact hit, one figure per repetition of ``n`` requests; with
    ``dashboard``, the dashboard's data is built every that many seconds meanwhile."""
    config = ProxyConfig.load(None, {"upstream": "http://127.0.0.1:9", "semantic": False})
    app = create_app(config)
    proxy = app.state.proxy
    tenant = proxy.tenants.for_headers([("authorization", "Bearer sk-bench")])
    proxy.llm.store(prepare(CHAT, json.loads(BODY), tenant, ""), ANSWER)
    seen: list[bytes | None] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            seen.append(dict(message["headers"]).get(b"x-cachekit-cache"))

    await app(_scope(), receive, send)
    if seen[-1] != b"HIT":
        raise SystemExit(f"the stored answer was not served: {seen[-1]!r}")
    stop = threading.Event()
    if dashboard:
        threading.Thread(target=_poll_dashboard, args=(proxy, dashboard, stop), daemon=True).start()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            await app(_scope(), receive, send)
        out.append((time.perf_counter() - t0) / n * 1e6)
    stop.set()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--n", type=int, default=3000, help="requests per repetition")
    ap.add_argument(
        "--dashboard", type=float, metavar="S", help="build the dashboard's data every S seconds"
    )
    args = ap.parse_args()
    runs = asyncio.run(run(args.reps, args.n, args.dashboard))
    print(
        f"exact hit through the ASGI app: {statistics.median(runs):.1f} us per request "
        f"(median of {len(runs)}; range {min(runs):.1f}-{max(runs):.1f})"
    )


if __name__ == "__main__":
    main()
