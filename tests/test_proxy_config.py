"""``cachekit serve`` settings: config file, command-line overrides, bad values."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cachekit.cli.main import build_parser
from cachekit.proxy.config import ProxyConfig, load_embedder
from cachekit.proxy.server import config_from_args
from cachekit.testing.embedders import DeterministicTestEmbedder


def test_file_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "ck.toml"
    f.write_text(
        'namespace = "prod"\nthreshold = 0.9\n[shared_scope]\nteam = ["sk-a"]\n'
        '[proxy]\nupstream = "http://up:1"\nport = 9000\nworkers = 2\n'
    )
    args = build_parser().parse_args(
        [
            "serve",
            "--config",
            str(f),
            "--port",
            "9100",
            "--threshold",
            "0.95",
            "--shared-scope",
            "ops=sk-b,sk-c",
            "--no-semantic",
        ]
    )
    config = config_from_args(args)
    assert (config.proxy.upstream, config.proxy.port, config.proxy.workers) == (
        "http://up:1",
        9100,
        2,
    )
    assert (config.cache.namespace, config.cache.threshold) == ("prod", 0.95)
    assert config.cache.semantic is False
    tenants = config.cache.tenants()
    assert tenants.resolve("Bearer sk-a") == "group:team"
    assert tenants.resolve("Bearer sk-c") == "group:ops"
    # Worker processes rebuild the same settings from the environment.
    again = ProxyConfig.from_env(config.to_env())
    assert again.proxy == config.proxy and again.cache.threshold == 0.95


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[proxy]\nupstream = "ftp://x"\n', "upstream"),
        ('[proxy]\nupstream = "http://x"\nprot = 1\n', "prot"),
        ('threshhold = 0.9\n[proxy]\nupstream = "http://x"\n', "threshhold"),
        ('threshold = 1.5\n[proxy]\nupstream = "http://x"\n', "threshold"),
        ('semantic_max_bytes = 0\n[proxy]\nupstream = "http://x"\n', "semantic_max_bytes"),
        ('[proxy]\nupstream = "http://x"\nmax_upstream_per_caller = -1\n', "integer >= 0"),
        ('[proxy]\nupstream = "http://x"\nmax_upstream_per_caller = "64"\n', "got '64'"),
        ('[proxy]\nupstream = "http://x"\nmetrics_max_models = 0\n', "metrics_max_models=0"),
        ('[proxy]\nupstream = "http://x"\nmax_passthrough_body_bytes = 1.5\n', "bytes=1.5"),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "ck.toml"
    f.write_text(text)
    with pytest.raises(ValueError, match=match):
        ProxyConfig.load(f)


def test_semantic_max_bytes_reaches_the_semantic_index() -> None:
    from cachekit.llm import build_cache

    args = build_parser().parse_args(
        ["serve", "--upstream", "http://up:1", "--semantic-max-bytes", "1048576"]
    )
    config = config_from_args(args)
    assert config.cache.semantic_max_bytes == 2**20
    llm = build_cache(config.cache, embedder=DeterministicTestEmbedder())
    try:
        assert llm.semantic_function().tier.max_bytes == 2**20
    finally:
        llm.close()
    default = build_cache(
        ProxyConfig.load(None, {"upstream": "http://up:1"}).cache,
        embedder=DeterministicTestEmbedder(),
    )
    try:
        assert default.semantic_function().tier.max_bytes == 256 * 2**20
    finally:
        default.close()


def test_bad_shared_scope_option() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--shared-scope", "nokeys"])


def test_cli_reports_bad_settings_without_a_traceback() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cachekit", "serve"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "upstream" in out.stderr and "Traceback" not in out.stderr


def test_load_embedder() -> None:
    assert load_embedder("") is None
    emb = load_embedder("cachekit.testing.embedders:DeterministicTestEmbedder")
    assert isinstance(emb, DeterministicTestEmbedder)
    with pytest.raises(ValueError):
        load_embedder("no-colon")


def strict_policy(setting: float | None) -> Any:
    from cachekit.semantic.policy.hit_policy import ThresholdPolicy

    return ThresholdPolicy(0.999)


def test_serve_builds_a_policy_named_module_callable() -> None:
    from cachekit.llm import build_cache

    name = f"{__name__}:strict_policy"
    args = build_parser().parse_args(["serve", "--upstream", "http://up:1", "--policy", name])
    config = config_from_args(args)
    llm = build_cache(config.cache, embedder=DeterministicTestEmbedder())
    try:
        assert llm.semantic_function().tier.policy.threshold == 0.999
    finally:
        llm.close()
    with pytest.raises(ValueError, match="cannot be imported"):
        ProxyConfig.load(None, {"upstream": "http://up:1", "policy": "nowhere.at.all:f"})


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            ["--max-error", "0.05"],
            "--max-error is the error-bounded policy's setting, but the "
            "policy is threshold: add --policy error-bounded",
        ),
        (
            ["--policy", "verified", "--threshold", "0.9"],
            "use --policy-setting, or --min-probability",
        ),
        (
            ["--policy", "threshold", "--min-probability", "0.9"],
            "add --policy verified|the policy is threshold",
        ),
    ],
)
@pytest.mark.parametrize("command", ["serve", "replay"])
def test_a_setting_of_another_policy_is_refused_with_the_fix(
    command: str, flags: list[str], expected: str, tmp_path: Any, capsys: Any
) -> None:
    """Both commands share the policy options and check them together: a setting is never read
    as another policy's number (``--max-error 0.05`` alone ran a threshold of 0.05)."""
    from cachekit.cli.main import main

    log = tmp_path / "log.jsonl"
    log.write_text("")
    first = ["serve", "--upstream", "http://up:1"] if command == "serve" else ["replay", str(log)]
    code: object
    try:
        code = main([*first, *flags])
    except SystemExit as exc:  # serve reports through argparse
        code = exc.code
    assert code == 2
    assert re.search(expected, capsys.readouterr().err)


@pytest.mark.parametrize(
    ("flags", "policy", "threshold", "setting"),
    [
        ([], None, None, None),
        (["--threshold", "0.9"], None, 0.9, None),
        (["--policy", "error-bounded", "--max-error", "0.05"], "error-bounded", None, 0.05),
        (["--policy", "verified", "--min-probability", "0.8"], "verified", None, 0.8),
        (["--policy", "error-bounded", "--policy-setting", "0.02"], "error-bounded", None, 0.02),
    ],
)
def test_serve_maps_the_policy_options_onto_its_config(
    flags: list[str], policy: str | None, threshold: float | None, setting: float | None
) -> None:
    args = build_parser().parse_args(["serve", "--upstream", "http://up:1", *flags])
    cache = config_from_args(args).cache
    assert (cache.threshold, cache.policy_setting) == (threshold, setting)
    assert cache.policy == (policy or "threshold")
