"""Shadow mode against replay on one log: the would-have-hit rate ``cachekit serve --shadow``
measures on live traffic, beside the hit rate ``cachekit replay`` predicts for the same log.

    python -m bench.proxy.shadow_replay [--log bench/data/replay/replay_dev] [--limit N]

The log (a Batch API input, its output and truth files) is sent, in order, through ``cachekit
serve --shadow`` (the bundled model, its default threshold, no Redis) in front of an upstream this
script serves on a free loopback port, which answers each request with its logged answer. Each
tenant of the log calls with an API key of its own. After each miss the script waits (up to 2 s)
until the answer is stored, as replay stores each answer before the next request. Counted from
the responses' headers: exact hits (served), shadowed semantic hits (``x-cachekit-shadow:
SEMANTIC_HIT``, sent upstream) and semantic hits served (must be 0). The truth file judges each
shadowed hit (right for a repeat or a paraphrase of its match, else wrong), and the agreement
scores of the shadow log are compared with those judgements. Then ``cachekit replay`` runs on the
same files with the same settings. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict, deque
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench.common.procs import free_port

CHAT = "/v1/chat/completions"


def _lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _canonical(body: Any) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


class LogUpstream:
    """Answers each request with the logged answer of the same body (in log order)."""

    def __init__(self, inputs: list[dict[str, Any]], outputs: dict[str, Any]) -> None:
        self.answers: dict[str, deque[Any]] = defaultdict(deque)
        for rec in inputs:
            out = outputs[rec["custom_id"]]["response"]["body"]
            self.answers[_canonical(rec["body"])].append(out)
        self.port = free_port()
        app = Starlette(routes=[Route(CHAT, self.chat, methods=["POST"])])
        config = uvicorn.Config(app, port=self.port, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def chat(self, request: Request) -> JSONResponse:
        queue = self.answers.get(_canonical(json.loads(await request.body())))
        if not queue:
            return JSONResponse({"error": {"message": "not in the log"}}, status_code=404)
        answer = queue.popleft() if len(queue) > 1 else queue[0]
        return JSONResponse(answer)

    def __enter__(self) -> LogUpstream:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)  # startup poll, bounded
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _serve(upstream: str, port: int, log: Path, extra: list[str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "cachekit", "serve", "--upstream", upstream, "--port", str(port)]
    cmd += ["--shadow", "--shadow-log", str(log), "--namespace", "shadowbench", *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CACHEKIT_TENANT_SECRET": "bench"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit("cachekit serve exited")
        time.sleep(0.2)  # startup poll, bounded
    proc.kill()
    raise SystemExit("cachekit serve did not start")


def _stored(client: httpx.Client, body: Any, key: str) -> None:
    """Wait (up to 2 s) until the answer to ``body`` is stored."""
    headers = {
        "authorization": f"Bearer {key}",
        "cache-control": "only-if-cached",
        "x-cachekit-threshold": "1",
    }
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if client.post(CHAT, content=_canonical(body), headers=headers).status_code == 200:
            return
        time.sleep(0.01)  # poll interval, bounded by the deadline


def _through_proxy(
    base: str, inputs: list[dict[str, Any]], truth: dict[str, Any]
) -> tuple[Counter[str], list[dict[str, Any]]]:
    counts: Counter[str] = Counter()
    shadowed: list[dict[str, Any]] = []
    with httpx.Client(base_url=base, timeout=60.0) as client:
        for i, rec in enumerate(inputs):
            key = f"sk-{rec['metadata']['tenant']}"
            r = client.post(
                CHAT, content=_canonical(rec["body"]), headers={"authorization": f"Bearer {key}"}
            )
            cache, shadow = r.headers.get("x-cachekit-cache"), r.headers.get("x-cachekit-shadow")
            counts[cache or "none"] += 1
            if shadow and shadow.startswith("SEMANTIC_HIT"):
                counts["shadow_hit"] += 1
                shadowed.append(rec)
                right = truth[rec["custom_id"]]["kind"] in ("repeat", "paraphrase")
                counts["shadow_right" if right else "shadow_wrong"] += 1
            if cache == "MISS":
                _stored(client, rec["body"], key)
            if (i + 1) % 500 == 0:
                print(f"  {i + 1} requests sent", flush=True)
    return counts, shadowed


def _replay(prefix: str, limit: int, tmp: Path, extra: list[str]) -> dict[str, Any]:
    files = {p: Path(f"{prefix}.{p}.jsonl") for p in ("input", "output", "truth")}
    if limit:
        for part, path in list(files.items()):
            cut = tmp / f"cut.{part}.jsonl"
            cut.write_text("".join(path.read_text().splitlines(True)[:limit]))
            files[part] = cut
    out = tmp / "replay.json"
    cmd = [sys.executable, "-m", "cachekit", "replay", str(files["input"])]
    cmd += ["--outputs", str(files["output"]), "--truth", str(files["truth"])]
    cmd += ["--json", str(out), "--quiet", "--no-sweep", *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(cmd, check=True, env=env, timeout=3600)
    return dict(json.loads(out.read_text()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", default="bench/data/replay/replay_dev", help="the log prefix")
    ap.add_argument("--limit", type=int, default=0, help="only the first N requests")
    ap.add_argument("--keep-log", metavar="FILE", help="keep the shadow log here (for labels)")
    ap.add_argument("--embedder", default="", help="as cachekit serve's and replay's --embedder")
    args = ap.parse_args()
    prefix = args.log
    inputs = _lines(Path(f"{prefix}.input.jsonl"))
    outputs = {o["custom_id"]: o for o in _lines(Path(f"{prefix}.output.jsonl"))}
    truth = {t["custom_id"]: t for t in _lines(Path(f"{prefix}.truth.jsonl"))}
    if args.limit:
        inputs = inputs[: args.limit]
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        log = Path(args.keep_log) if args.keep_log else tmp / "shadow.jsonl"
        log.unlink(missing_ok=True)
        extra = ["--embedder", args.embedder] if args.embedder else []
        t0 = time.perf_counter()
        with LogUpstream(inputs, outputs) as upstream:
            port = free_port()
            proc = _serve(f"http://127.0.0.1:{upstream.port}", port, log, extra)
            try:
                counts, shadowed = _through_proxy(f"http://127.0.0.1:{port}", inputs, truth)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and _count_lines(log) < len(shadowed):
                    time.sleep(0.1)  # the last pairs are scored in the background
            finally:
                proc.terminate()
                proc.wait(15)
        took = time.perf_counter() - t0
        pairs = _lines(log) if log.exists() else []
        report = _replay(prefix, args.limit, tmp, extra)
    n = len(inputs)
    would = counts["HIT"] + counts["shadow_hit"]
    print(f"{n} requests through cachekit serve --shadow in {took:.0f} s:")
    print(f"  exact hits served {counts['HIT']}, semantic hits served {counts['SEMANTIC_HIT']}")
    print(
        f"  shadowed semantic hits {counts['shadow_hit']} (right {counts['shadow_right']}, "
        f"wrong {counts['shadow_wrong']}); would-have-hit rate {would / n:.4f}"
    )
    _agreement(pairs, shadowed, truth)
    print("cachekit replay on the same log:", json.dumps(_replay_figures(report)))


def _count_lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


def _agreement(pairs: list[dict[str, Any]], shadowed: list[Any], truth: dict[str, Any]) -> None:
    """How the answer scorer's verdicts line up with the truth file's: of the shadowed hits the
    truth calls right, how many answers agreed; of those it calls wrong, how many did not."""
    if not pairs:
        print("  no shadow pairs logged")
        return
    kinds: dict[tuple[str, str], deque[str]] = defaultdict(deque)
    for rec in shadowed:
        text = rec["body"]["messages"][-1]["content"]
        kinds[(text, rec["body"]["model"])].append(truth[rec["custom_id"]]["kind"])
    table: Counter[tuple[bool, bool]] = Counter()
    for p in pairs:
        queue = kinds.get((p["query"], p["model"]))
        if queue:
            good = queue.popleft() in ("repeat", "paraphrase")
            table[(good, bool(p["agree"]))] += 1
    right, wrong = (
        table[(True, True)] + table[(True, False)],
        table[(False, True)] + table[(False, False)],
    )
    print(
        f"  shadow log: {len(pairs)} pairs scored; of {right} right hits {table[(True, True)]} "
        f"agreed, of {wrong} wrong hits {table[(False, False)]} disagreed (answer cosine < 0.9)"
    )


def _replay_figures(report: dict[str, Any]) -> dict[str, Any]:
    keys = ("requests", "hit_rate", "exact_hits", "semantic_hits", "wrong_hits", "wrong_hit_rate")
    flat = {k: report.get(k) for k in keys if k in report}
    return flat or {"keys": sorted(report)[:40]}


if __name__ == "__main__":
    main()
