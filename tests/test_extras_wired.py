"""Each feature with an optional dependency names its extra where it is set up, once: a child
process blocks the module (``sys.modules[name] = None`` makes importing it fail) before
importing cachekit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = """
import json, sys, warnings
for name in {blocked!r}:
    sys.modules[name] = None
warnings.simplefilter("error")  # a degraded mode that warns instead of failing fails here
from cachekit import Cache
cache = Cache()
try:
{body}
    print(json.dumps({{"error": None}}))
except Exception as exc:
    print(json.dumps({{"error": type(exc).__name__, "message": str(exc),
                      "is_import_error": isinstance(exc, ImportError)}}))
"""

SEMANTIC_DEFAULT = """
    @cache.semantic(threshold=0.9)
    def answer(prompt: str) -> str:
        return prompt
"""

SEMANTIC_TEST_EMBEDDER = """
    from cachekit.testing.embedders import DeterministicTestEmbedder
    @cache.semantic(threshold=0.9, embedder=DeterministicTestEmbedder(), batching=False)
    def answer(prompt: str) -> str:
        return prompt
    answer("how do I reset my password")
    assert answer("how do I reset my password please") == "how do I reset my password"
"""

SEMANTIC_CALLABLE = """
    @cache.semantic(threshold=0.9, embedder=lambda texts: [[1.0, 0.0] for _ in texts])
    def answer(prompt: str) -> str:
        return prompt
"""

PROMETHEUS = """
    from cachekit import register_prometheus
    register_prometheus(cache)
"""


def run_child(blocked: tuple[str, ...], body: str) -> dict[str, object]:
    code = CHILD.format(blocked=blocked, body=body.strip("\n"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("blocked", "body", "extra", "module"),
    [
        (("numpy",), SEMANTIC_DEFAULT, "semantic", "numpy"),
        (("numpy",), SEMANTIC_CALLABLE, "semantic", "numpy"),
        (("faiss",), SEMANTIC_DEFAULT, "semantic", "faiss"),  # numpy alone: not exact-only
        (("faiss",), SEMANTIC_TEST_EMBEDDER, "semantic", "faiss"),
        (("onnxruntime",), SEMANTIC_DEFAULT, "semantic", "onnxruntime"),
        (("tokenizers",), SEMANTIC_DEFAULT, "semantic", "tokenizers"),
        (("prometheus_client",), PROMETHEUS, "prometheus", "prometheus_client"),
        (("openai",), "    import cachekit.adapters.openai", "openai", "openai"),
        (
            ("langchain_core",),
            "    import cachekit.adapters.langchain",
            "langchain",
            "langchain_core",
        ),
    ],
)
def test_missing_extra_is_named_at_set_up(
    blocked: tuple[str, ...], body: str, extra: str, module: str
) -> None:
    got = run_child(blocked, body)
    assert got["error"] == "MissingExtraError" and got["is_import_error"], got
    message = str(got["message"])
    assert f"pip install 'cachekit-ml[{extra}]'" in message
    assert f"in a cachekit checkout, pip install -e '.[{extra}]'" in message
    assert f"({module} is missing)" in message


def test_a_given_embedder_needs_no_embedding_library() -> None:
    # The model libraries are checked only when the default embedder will be built.
    got = run_child(
        ("onnxruntime", "onnx", "tokenizers", "safetensors", "torch", "sentence_transformers"),
        SEMANTIC_TEST_EMBEDDER,
    )
    assert got == {"error": None}


def test_semantic_caching_needs_no_redis() -> None:
    # The semantic tier's Redis sharing loads redis-py only when a Redis store is used.
    got = run_child(("redis", "hiredis"), SEMANTIC_TEST_EMBEDDER)
    assert got == {"error": None}


@pytest.mark.parametrize(
    ("blocked", "argv", "extra"),
    [
        ("uvicorn", ["serve", "--upstream", "http://127.0.0.1:1"], "proxy"),
        ("starlette", ["serve", "--upstream", "http://127.0.0.1:1"], "proxy"),
        ("httpx", ["serve", "--upstream", "http://127.0.0.1:1"], "proxy"),
        ("rich", ["replay", "log.jsonl"], "replay"),
        ("matplotlib", ["replay", "log.jsonl", "--html", "r.html"], "replay"),
    ],
)
def test_a_command_names_its_missing_extra_instead_of_a_traceback(
    blocked: str, argv: list[str], extra: str
) -> None:
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from cachekit.cli.main import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert f"needs the '{extra}' extra ({blocked} is missing)" in out.stderr
    assert f"pip install -e '.[{extra}]'" in out.stderr


def test_the_command_line_loads_without_the_proxy_and_replay_extras() -> None:
    """``cachekit demo`` (the README's first command, on the ``semantic`` extra alone) must not
    import what only ``serve`` or ``replay`` need."""
    code = (
        "import sys\n"
        "for m in ('httpx', 'fastapi', 'starlette', 'uvicorn', 'rich', 'matplotlib'):\n"
        "    sys.modules[m] = None\n"
        "from cachekit.cli.main import build_parser\n"
        "build_parser().parse_args(['demo'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
