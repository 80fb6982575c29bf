"""``cachekit serve`` without an upstream, through the command's ``main()``: the upstream comes
from ``--upstream`` or from the ``[proxy]`` table of the ``--config`` file (no environment
variable sets it), so ``--help`` says so, and giving neither is a usage error naming both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cachekit.cli.main as cli
from cachekit.proxy import server as serve_cli


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)``'s exit status (argparse exits through SystemExit), stdout and stderr."""
    try:
        code: Any = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


@pytest.mark.parametrize(
    "config", [None, "[proxy]\nport = 9000\n"], ids=["no-config", "config-without-upstream"]
)
def test_serve_without_an_upstream_is_a_usage_error_naming_where_it_comes_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str | None
) -> None:
    argv = ["serve"]
    if config is not None:
        (tmp_path / "ck.toml").write_text(config)
        argv += ["--config", str(tmp_path / "ck.toml")]
    code, out, err = run_main(argv, capsys)
    assert code == 2 and out == ""
    assert err.startswith("usage: cachekit serve")
    assert "cachekit serve: error: the following arguments are required: --upstream" in err
    assert "upstream in the [proxy] table of the --config file" in err
    assert "Traceback" not in err and "got ''" not in err


def test_serve_help_says_upstream_is_required_unless_the_config_file_gives_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_main(["serve", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())  # argparse wraps the description
    assert (
        "--upstream is required unless the --config file sets upstream in its [proxy] table" in text
    )


def test_serve_takes_the_upstream_from_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ck.toml").write_text('[proxy]\nupstream = "http://up.example:1"\n')
    served: list[Any] = []
    monkeypatch.setattr(cli, "SERVE_NEEDS", ())  # no server is started: the extra is not needed

    def serve(config: Any) -> int:
        served.append(config)
        return 0

    monkeypatch.setattr(serve_cli, "serve", serve)
    code, _, err = run_main(["serve", "--config", str(tmp_path / "ck.toml")], capsys)
    assert code == 0, err
    assert [c.proxy.upstream for c in served] == ["http://up.example:1"]
