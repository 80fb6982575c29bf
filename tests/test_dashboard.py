"""The proxy's dashboard (``GET /dashboard`` and ``GET /dashboard/data``): the JSON over real
traffic through the proxy (Starlette's TestClient in front of the fake upstream), its arithmetic
on a bare :class:`ProxyMetrics`, and the page itself in a real headless Chromium (Selenium,
driving Debian's ``chromium`` through its ``chromedriver``; skipped with the reason when either
is missing). ``CACHEKIT_DASHBOARD_SCREENSHOT=1`` makes the browser test write
``docs/images/dashboard.png`` (the screenshot docs/proxy.md shows); otherwise the suite writes
nothing in the repository."""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from cachekit.proxy.app import create_app
from cachekit.proxy.config import ProxyConfig
from cachekit.proxy.metrics import OTHER, ProxyMetrics
from cachekit.proxy.ops.dashboard import Dashboard, collect, quantile
from cachekit.testing.clock import ManualClock, wait_until
from cachekit.testing.upstream import FakeUpstream, serving

sys.path.insert(0, str(Path(__file__).parent))
from test_proxy_coalesce import ProxyThread

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "docs" / "images" / "dashboard.png"
CHAT = "/v1/chat/completions"
MODEL = "gpt-4o-mini"
AUTH = {"authorization": "Bearer sk-x"}
PANELS = {"hitrate", "endpoints", "saved", "latency", "refusals", "shadow", "similarity", "health"}
TEST_EMBEDDER = "cachekit.testing.embedders:DeterministicTestEmbedder"


def chat(text: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}]}


def ordered(summary: dict[str, Any]) -> list[float]:
    return [summary["p50"], summary["p95"], summary["p99"]]


# ---------------------------------------------------------------------- the arithmetic


def test_quantile_interpolates_within_buckets_like_histogram_quantile() -> None:
    buckets = [(0.1, 0.0), (0.2, 10.0), (0.5, 20.0), (math.inf, 20.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.2)
    assert quantile(0.25, buckets) == pytest.approx(0.15)
    assert quantile(0.75, buckets) == pytest.approx(0.35)
    assert quantile(0.99, [(1.0, 0.0), (math.inf, 4.0)]) == 1.0  # +Inf: the last finite bound
    assert quantile(0.5, [(1.0, 2.0), (math.inf, 2.0)]) == pytest.approx(0.5)  # from 0
    assert quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert quantile(0.5, []) is None


def test_collect_reads_every_panel_from_the_registry() -> None:
    m = ProxyMetrics()
    for outcome, n in (("HIT", 6), ("SEMANTIC_HIT", 2), ("MISS", 4), ("COALESCED", 0)):
        for _ in range(n):
            m.child(m.requests, "chat", outcome).inc()
    m.child(m.requests, "embeddings", "MISS").inc()
    m.child(m.requests, "chat", "BYPASS").inc(3)
    for _ in range(6):
        m.child(m.hit_latency, "HIT").observe(0.0003)
    m.child(m.hit_latency, "SEMANTIC_HIT").observe(0.004)
    m.child(m.hit_latency, "SEMANTIC_HIT").observe(0.006)
    for s in (0.2, 0.3, 0.7, 0.8, 3.0):
        m.upstream_latency.labels("chat").observe(s)
    m.saved(MODEL, (10, 20), 0.001)
    m.saved(MODEL, (5, 5), 0.0005)
    m.saved("mystery-model", (1, 1), None)
    for reason in ("numbers", "numbers", "threshold"):
        m.refused(reason)
    for similarity in (0.3, 0.52, 0.81, 0.84, 0.99, None):
        m.nearest(similarity)
    for _ in range(4):
        m.by_model(MODEL, "HIT")
    m.by_model(MODEL, "MISS")
    m.by_model(MODEL, "BYPASS")

    d = collect(m, now=123.0)
    assert d["t"] == 123.0
    assert d["requests"]["by_outcome"] == {
        "HIT": 6,
        "SEMANTIC_HIT": 2,
        "MISS": 5,
        "COALESCED": 0,
        "BYPASS": 3,
        "PASSTHROUGH": 0,
    }
    assert d["requests"]["total"] == 16
    chat_row = d["requests"]["by_endpoint"]["chat"]
    assert (chat_row["total"], chat_row["lookups"]) == (15, 12)
    assert chat_row["hit_rate"] == pytest.approx(8 / 12)
    assert d["requests"]["by_endpoint"]["embeddings"]["hit_rate"] == 0.0
    assert d["hit_rate"] == {
        "all": pytest.approx(8 / 13),
        "exact": pytest.approx(6 / 13),
        "semantic": pytest.approx(2 / 13),
        "lookups": 13,
    }
    assert d["saved"] == {
        "tokens": 42,
        "prompt_tokens": 16,
        "completion_tokens": 26,
        "dollars": pytest.approx(0.0015),
        "unpriced_hits": 1,
    }
    rows = {r["model"]: r for r in d["models"]}
    assert [r["model"] for r in d["models"]] == [MODEL, "mystery-model"]  # by dollars saved
    assert rows[MODEL] == {
        "model": MODEL,
        "requests": 6,
        "hits": 4,
        "hit_rate": pytest.approx(4 / 5),  # a bypass looked nothing up
        "tokens": 40,
        "dollars": pytest.approx(0.0015),
        "unpriced_hits": 0,
    }
    assert rows["mystery-model"]["requests"] == 0
    assert rows["mystery-model"]["unpriced_hits"] == 1

    lat = d["latency"]
    assert lat["exact_hit"]["count"] == 6 and lat["semantic_hit"]["count"] == 2
    assert lat["hit"]["count"] == 8
    assert lat["exact_hit"]["mean"] == pytest.approx(0.0003)
    assert 0.00025 <= lat["exact_hit"]["p50"] <= lat["exact_hit"]["p99"] <= 0.0005  # its bucket
    assert 0.0025 <= lat["semantic_hit"]["p50"] <= 0.01
    assert lat["upstream"]["count"] == 5
    assert lat["upstream"] == lat["upstream_by_endpoint"]["chat"]
    # Rank 2.5 of 5 falls in the 0.5..1.0 bucket (2 below it, 2 in it): a quarter of the way in.
    assert lat["upstream"]["p50"] == pytest.approx(0.625)
    p50, p95, p99 = ordered(lat["upstream"])
    assert p50 <= p95 <= p99 <= 5.0

    assert d["refusals"] == {"total": 3, "by_reason": {"numbers": 2, "threshold": 1}}
    sim = d["miss_similarity"]
    assert sim["count"] == 5  # None: no near entry, not counted
    assert [b["le"] for b in sim["buckets"]][:2] == [0.5, 0.55]
    counts = {b["le"]: b["count"] for b in sim["buckets"]}
    assert counts[0.5] == 1 and counts[0.55] == 1 and counts[0.85] == 2 and counts[1.0] == 1
    assert sum(counts.values()) == 5
    assert d["in_flight"]["now"] == 0
    assert d["sample"]["endpoints"]["chat"] == {
        "HIT": 6,
        "SEMANTIC_HIT": 2,
        "MISS": 4,
        "COALESCED": 0,
    }


def test_collect_before_any_traffic_has_nulls_not_zeros_for_rates() -> None:
    d = collect(ProxyMetrics())
    assert d["hit_rate"] == {"all": None, "exact": None, "semantic": None, "lookups": 0}
    assert d["requests"]["by_endpoint"] == {} and d["models"] == []
    assert d["latency"]["hit"] == {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None}
    assert d["miss_similarity"]["count"] == 0 and len(d["miss_similarity"]["buckets"]) == 11


def test_model_rows_stay_bounded_whatever_the_upstream_names() -> None:
    m = ProxyMetrics(max_models=3)
    for i in range(200):
        m.saved(f"model-{i}", (1, 1), 0.01)
    rows = collect(m)["models"]
    assert len(rows) == 4 and OTHER in {r["model"] for r in rows}
    assert rows[0]["model"] == OTHER and rows[0]["tokens"] == 2 * 197
    assert rows[0]["requests"] is None  # the proxy counted no requests by model


def test_the_server_keeps_a_bounded_history_one_sample_a_second_at_most() -> None:
    health = {"status": "ok", "problems": []}
    proxy: Any = SimpleNamespace(metrics=ProxyMetrics(), health=lambda: health)
    for size, kept in ((10, [0.0, 1.0, 2.0, 3.0, 4.0]), (3, [2.0, 3.0, 4.0])):
        clock = ManualClock(0.0)
        board = Dashboard(proxy, history=size, every=1.0, clock=clock)
        for step in (0.0, 0.4, 0.6, 0.5, 0.5, 1.0, 1.0):  # 0.4 and 1.5: too soon
            clock.advance(step)
            d = board.data()
            assert d["health"] is health and d["sample"]["t"] == clock()
            assert "history" not in d
        assert [s["t"] for s in board.data(history=True)["history"]] == kept


# ---------------------------------------------------------------------- through the proxy


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with serving(FakeUpstream()) as upstream:
        yield upstream


def test_dashboard_data_after_misses_then_hits(fake: FakeUpstream) -> None:
    app = create_app(ProxyConfig.load(None, {"upstream": fake.url, "semantic": False}))
    prompts = ["What is a cache?", "What is a proxy?", "What is a token?"]
    with TestClient(app) as client:
        for round_ in range(3):  # 3 misses, then 6 exact hits
            for text in prompts:
                r = client.post(CHAT, json=chat(text), headers=AUTH)
                assert r.status_code == 200
                assert r.headers["x-cachekit-cache"] == ("MISS" if round_ == 0 else "HIT")
        r = client.get("/dashboard/data", params={"history": "1"})
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.headers["cache-control"] == "no-store"
        d = r.json()
        metrics = client.get("/metrics").text

    assert d["version"] == 1
    assert d["requests"]["by_outcome"]["MISS"] == 3 and d["requests"]["by_outcome"]["HIT"] == 6
    assert d["requests"]["total"] == 9
    assert d["requests"]["by_endpoint"]["chat"]["hit_rate"] == pytest.approx(6 / 9)
    assert d["hit_rate"]["all"] == pytest.approx(6 / 9)
    assert d["hit_rate"]["exact"] == pytest.approx(6 / 9) and d["hit_rate"]["semantic"] == 0.0
    assert d["stored"] == 3

    hit, up = d["latency"]["exact_hit"], d["latency"]["upstream"]
    assert hit["count"] == 6 and up["count"] == 3
    assert d["latency"]["semantic_hit"]["p50"] is None
    for summary, top in ((hit, 1.0), (up, 120.0)):  # the histograms' last finite bounds
        p50, p95, p99 = ordered(summary)
        assert 0 < p50 <= p95 <= p99 <= top
        assert summary["mean"] > 0
    assert d["latency"]["upstream_by_endpoint"]["chat"] == up

    saved = d["saved"]
    assert saved["tokens"] > 0 and saved["dollars"] > 0  # gpt-4o-mini has a list price
    assert saved["tokens"] == saved["prompt_tokens"] + saved["completion_tokens"]
    (row,) = d["models"]
    assert row["model"] == MODEL and row["tokens"] == saved["tokens"]
    assert row["dollars"] == pytest.approx(saved["dollars"])
    if row["requests"] is not None:  # once the proxy counts requests by model
        assert row["requests"] == 9 and row["hit_rate"] == pytest.approx(6 / 9)

    assert d["health"]["status"] == "ok" and d["health"]["problems"] == []
    assert d["in_flight"]["now"] == 0
    assert d["history"][-1] == d["sample"]
    assert d["sample"]["endpoints"]["chat"]["HIT"] == 6

    # The same numbers as /metrics: the dashboard reads the same registry.
    total = {}
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if s.name == "cachekit_proxy_requests_total":
                total[s.labels["cache"]] = s.value
    assert total == {"MISS": 3.0, "HIT": 6.0}


def test_the_page_is_one_self_contained_document(fake: FakeUpstream) -> None:
    app = create_app(ProxyConfig.load(None, {"upstream": fake.url, "semantic": False}))
    with TestClient(app) as client:
        r = client.get("/dashboard")
        assert client.post("/dashboard").status_code == 405
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    page = r.text
    assert set(re.findall(r'data-panel="(\w+)"', page)) == PANELS
    # Nothing to fetch: no src/href attribute, no CSS url() or @import; the one URL is the SVG
    # namespace, an identifier.
    assert not re.search(r"\b(src|href)\s*=|url\(|@import", page)
    assert re.findall(r"https?://[^\s\"']+", page) == ["http://www.w3.org/2000/svg"]
    assert "innerHTML" not in page  # data is set as text


# ---------------------------------------------------------------------- in a real browser

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVERS = ("chromedriver", "/usr/lib/chromium/chromedriver", "/usr/bin/chromedriver")


def _first(names: tuple[str, ...]) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium under Selenium, with the driver's path given (Selenium Manager never
    runs, so nothing is downloaded)."""
    binary, driver_path = _first(BROWSERS), _first(DRIVERS)
    if binary is None or driver_path is None:
        pytest.skip(
            "no Chromium browser and chromedriver found (Debian: apt-get install chromium "
            "chromium-driver; .ci/run installs them)"
        )
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (the dev extra has it)"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        "--disable-background-networking",
        "--no-first-run",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(
        service=webdriver.ChromeService(executable_path=driver_path), options=options
    )
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _stat(driver: Any, panel: str, stat: str) -> str:
    return str(
        driver.execute_script(
            "const e = document.querySelector(`[data-panel='${arguments[0]}'] "
            "[data-stat='${arguments[1]}'] b`); return e ? e.textContent : null;",
            panel,
            stat,
        )
    )


def _shows(driver: Any, panel: str, stat: str, want: str) -> Callable[[], bool]:
    return lambda: _stat(driver, panel, stat) == want


def _panels_ready(driver: Any) -> bool:
    state = driver.execute_script(
        "return [...document.querySelectorAll('[data-panel]')].map("
        "p => [p.dataset.panel, p.dataset.ready || '', p.innerText]);"
    )
    return {name for name, ready, text in state if ready == "1" and re.search(r"\d", text)} == (
        PANELS
    )


def test_browser_shows_every_panel_live_and_loads_nothing_from_outside(browser: Any) -> None:
    driver = browser
    waves = [  # misses; exact hits; semantic hits; near entries refused, and one more hit
        ["How do I reset my password", "What is the capital of France", "I have 3 cats"],
        ["How do I reset my password", "What is the capital of France"],
        ["how do I reset my password please", "what is the capital of france?"],
        ["I have 4 cats", "Is the sky blue", "Is the sky not blue", "I have 3 cats"],
    ]
    settings = {"semantic": True, "embedder": TEST_EMBEDDER, "threshold": 0.8}
    with serving(FakeUpstream()) as fake, ProxyThread(fake.url, **settings) as proxy:
        driver.get(proxy.url + "/dashboard?every=250")
        wait_until(_shows(driver, "hitrate", "lookups", "0"), timeout=30.0)
        sent = 0
        with httpx.Client(base_url=proxy.url, headers=AUTH, timeout=30.0) as client:
            for wave in waves:  # each wave seen live by the page before the next
                for text in wave:
                    assert client.post(CHAT, json=chat(text)).status_code == 200
                sent += len(wave)
                wait_until(_shows(driver, "hitrate", "lookups", str(sent)), timeout=30.0)
            data = client.get("/dashboard/data").json()
            wait_until(  # the server kept samples while the page polled
                lambda: len(client.get("/dashboard/data?history=1").json()["history"]) >= 2,
                timeout=30.0,
                interval=0.2,
            )
        assert data["hit_rate"]["lookups"] == sent
        assert data["requests"]["by_outcome"]["SEMANTIC_HIT"] >= 1
        assert data["refusals"]["total"] >= 1

        wait_until(lambda: _panels_ready(driver), timeout=30.0)
        assert _stat(driver, "hitrate", "all-hits") == f"{100 * data['hit_rate']['all']:.1f}%"
        assert _stat(driver, "refusals", "refused-near-entries") == str(data["refusals"]["total"])
        assert driver.find_elements("css selector", "[data-panel='hitrate'] svg path")

        # Everything the page loaded came from the proxy; nothing asks for more.
        origin = proxy.url + "/"
        loaded = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        assert loaded and all(name.startswith(origin) for name in loaded), loaded
        assert not driver.execute_script(
            "return document.querySelectorAll('script[src], link[href], img, iframe').length"
        )
        logged = driver.get_log("browser")  # the favicon the browser asks for by itself: 404
        errors = [e for e in logged if e["level"] == "SEVERE" and "favicon" not in e["message"]]
        assert not errors, errors  # a CSP violation or a script error would show here

        # A page opened now draws the recent past from the server's samples at once.
        driver.get(proxy.url + "/dashboard")
        wait_until(lambda: _panels_ready(driver), timeout=30.0)
        assert driver.execute_script("return samples.length") > 1

        if os.environ.get("CACHEKIT_DASHBOARD_SCREENSHOT"):
            _screenshot(driver, proxy)


def _screenshot(driver: Any, proxy: ProxyThread) -> None:
    """docs/images/dashboard.png: a cache warming up over some 20 s (each round of traffic in
    a sample of the server's history of its own), the page opened afterwards, in full."""
    rng = random.Random(7)
    seen: list[str] = []
    with httpx.Client(base_url=proxy.url, headers=AUTH, timeout=30.0) as client:

        def kept() -> int:
            return len(client.get("/dashboard/data?history=1").json()["history"])

        def more_than(n: int) -> Callable[[], bool]:
            return lambda: kept() > n

        for round_, question in enumerate(QUESTIONS):
            asked = [question]
            asked += rng.choices(seen, k=round_ // 3) if seen else []  # exact hits, more and more
            if seen and round_ % 2:
                asked.append(rng.choice(seen).lower() + " please")  # a paraphrase
            seen.append(question)
            for text in asked:
                client.post(CHAT, json=chat(text))
            wait_until(more_than(kept()), timeout=30.0, interval=0.2)
    driver.get(proxy.url + "/dashboard")
    wait_until(lambda: _panels_ready(driver), timeout=30.0)
    for _ in range(2):  # the page's full height at this width
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1400, "height": int(height), "deviceScaleFactor": 1, "mobile": False},
        )
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SCREENSHOT))


QUESTIONS = [
    "How do I reset my password",
    "What is the capital of France",
    "Explain photosynthesis briefly",
    "Write a haiku about autumn leaves",
    "What does HTTP status 404 mean",
    "Summarize the plot of Hamlet",
    "How do vaccines train the immune system",
    "Translate good morning into Spanish",
    "What causes ocean tides",
    "Give me a recipe for pancakes",
    "Why is the sky blue",
    "How does a hash table work",
    "What is the speed of light",
    "List the planets of the solar system",
    "How do I center a div in CSS",
    "What is a closure in JavaScript",
    "Recommend a beginner running plan",
    "What is the difference between TCP and UDP",
    "How do I brew green tea",
    "Explain compound interest",
]
