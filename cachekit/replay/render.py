"""The terminal view of a replay report (rich tables)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from cachekit.replay.capacity import Side
from cachekit.replay.report import Report

__all__ = [
    "fmt_money",
    "fmt_pct",
    "near_header",
    "near_rows",
    "print_report",
    "shorten_pair",
    "sweep_rows",
    "verdict_label",
]

#: Characters of each text shown in the near-miss listing.
NEAR_TEXT_WIDTH = 90


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}%"


def fmt_money(x: float | None) -> str:
    if x is None:
        return "-"
    return f"-${-x:,.4f}" if x < 0 else f"${x:,.4f}"


def _num(x: float | None, spec: str = ",.1f", unit: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{unit}"


def summary_rows(r: Report) -> list[tuple[str, str]]:
    d = r.to_dict(with_sweep=False)
    rows = [
        ("Requests", f"{r.requests:,}"),
        ("Exact hits", f"{r.exact_hits:,}"),
        ("Semantic hits", f"{r.semantic_hits:,}"),
        *_below_rows(r),
        ("Misses", f"{r.misses:,}"),
    ]
    rows += [(f"  nearest refused: {kind}", f"{n:,}") for kind, n in sorted(r.refusals.items())]
    rows += [
        ("Hit rate", fmt_pct(r.hit_rate)),
        *_baseline_rows(r),
        (
            "Tokens saved (prompt / completion)",
            f"{r.prompt_tokens_saved:,} / {r.completion_tokens_saved:,}",
        ),
        ("Dollars saved", fmt_money(d["dollars_saved"]["total"])),
    ]
    rows += [(f"  {model}", fmt_money(v)) for model, v in d["dollars_saved"]["by_model"].items()]
    rows += [
        ("Upstream latency saved", f"{r.latency_saved_s:,.1f} s"),
        (
            "Cache overhead p50 / p99",
            f"{_num(r.overhead_ms['p50'], '.3f')} / {_num(r.overhead_ms['p99'], '.3f')} ms",
        ),
    ]
    if r.embed_ms is not None:
        rows.append(("  of which one-text embedding", f"{r.embed_ms:.3f} ms"))
    if r.judged:
        rows += [
            ("Correct / wrong hits", f"{r.correct_hits:,} / {r.wrong_hits:,}"),
            ("Semantic precision", fmt_pct(r.semantic_precision)),
            ("Net dollars saved", fmt_money(d["net_dollars_saved"]["total"])),
            ("  a wrong answer costs (--wrong-cost)", fmt_money(r.wrong_cost)),
        ]
    return rows


def recommended_line(r: Report) -> str | None:
    """What the sweep recommends, in a sentence (None without a recommendation to state)."""
    rec = r.recommended
    if rec is None:
        return None
    if rec["setting"] is None:
        return f"Recommended setting: none ({rec['why']})."
    head = (
        f"Recommended setting: {rec['setting']:g} ({rec['rule']}): hit rate "
        f"{fmt_pct(rec['hit_rate'])}, wrong hits {fmt_pct(rec['wrong_hit_rate'])} of requests, "
        f"net {fmt_money(rec['net_dollars_saved'])}"
    )
    return head + (f". {rec['why']}." if rec.get("why") else ".")


def _below_rows(r: Report) -> list[tuple[str, str]]:
    """Semantic hits a rule served below the threshold, named (the number bonus)."""
    if not r.below_threshold:
        return []
    return [("  below the threshold: number bonus", f"{r.below_threshold:,}")]


def similarity_cell(similarity: float | None, rule: str | None) -> str:
    """A hit's similarity, marked when a rule served it below the threshold."""
    return _num(similarity, ".3f") + (" (number bonus)" if rule else "")


def _baseline_rows(r: Report) -> list[tuple[str, str]]:
    """The exact-only baseline beside the headline: what semantic matching adds."""
    base = r.exact_only
    if base is None:
        return []
    return [
        ("  exact only (semantic off)", fmt_pct(base["hit_rate"])),
        ("  dollars saved exact only", fmt_money(base["dollars_saved"])),
    ]


def breakdown_rows(r: Report, name: str) -> list[list[str]]:
    """One row per tenant (``name="tenant"``) or model: requests, hit rate, wrong hits."""
    rows = []
    for value, row in r.breakdown.get(name, {}).items():
        wrong = f"{row['wrong_hits']:,}" if r.judged else "-"
        rows.append([value, f"{row['requests']:,}", fmt_pct(row["hit_rate"]), wrong])
    return rows


def capacity_rows(r: Report) -> list[tuple[str, str, str]]:
    cap = r.capacity
    a, b = cap.without_cache, cap.with_cache

    def row(label: str, f: Any) -> tuple[str, str, str]:
        return label, f(a), f(b)

    def lat(s: Side, p: str) -> str:
        return "saturated" if s.saturated else _num(s.latency_ms[p], ",.0f", " ms")

    return [
        row("Upstream requests/s", lambda s: _num(s.upstream_rps, ",.2f")),
        row("Mean upstream latency", lambda s: _num(s.mean_upstream_latency_s, ",.3f", " s")),
        row("In flight (L = lambda W)", lambda s: _num(s.in_flight, ",.2f")),
        row("Utilisation", lambda s: fmt_pct(s.utilisation)),
        row("End-to-end p50", lambda s: lat(s, "p50")),
        row("End-to-end p99", lambda s: lat(s, "p99")),
        row("Concurrency needed (knee)", lambda s: _num(s.concurrency_needed, ",d")),
        row("Headroom to the knee", lambda s: _num(s.headroom_x, ",.2f", "x")),
    ]


def sweep_rows(r: Report) -> list[list[str]]:
    rows = []
    for p in r.sweep:
        d = p.to_dict(with_sweep=False)
        rows.append(
            [
                f"{p.threshold:.2f}" if p.threshold is not None else "-",
                fmt_pct(p.hit_rate),
                f"{p.semantic_hits:,}",
                "-" if p.wrong_hits is None else f"{p.wrong_hits:,}",
                fmt_pct(p.wrong_hit_rate),
                fmt_pct(p.semantic_precision),
                fmt_money(d["dollars_saved"]["total"]),
                fmt_money(d["net_dollars_saved"]["total"]) if p.judged else "-",
                _num(p.capacity.with_cache.latency_ms["p99"], ",.0f", " ms"),
            ]
        )
    return rows


def verdict_label(verdict: bool | None) -> str:
    """What the truth says the refusal did: lost a right answer, or kept a wrong one out."""
    if verdict is None:
        return "unjudged"
    return "missed paraphrase" if verdict else "prevented wrong hit"


def shorten_pair(a: str, b: str, width: int = NEAR_TEXT_WIDTH) -> tuple[str, str]:
    """Both texts cut to about ``width`` characters, starting a little before where they first
    differ when that is past the opening: two long prompts sharing a preamble would otherwise
    show the same opening twice and hide the difference that made the refusal."""
    a, b = " ".join(a.split()), " ".join(b.split())
    context = width // 4
    start = _common_prefix(a, b) - context
    if start + context <= width - context:  # the difference shows in the opening
        start = 0
    else:
        start = a.rfind(" ", 0, start) + 1  # a word boundary (the texts agree up to there)
    return _window(a, start, width), _window(b, start, width)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((k for k in range(n) if a[k] != b[k]), n)


def _window(text: str, start: int, width: int) -> str:
    piece = ("…" if start > 0 else "") + text[start:]
    return piece if len(piece) <= width else piece[: width - 1] + "…"


def near_header(r: Report) -> list[str]:
    head = ["Request", "Similarity", "Reason", "Its text", "Nearest entry's text (from)"]
    return head + (["Verdict"] if r.judged else [])


def near_rows(r: Report) -> list[list[str]]:
    """The refused near misses, one row each, texts cut around their difference."""
    rows = []
    for n in r.near_sample:
        text, nearest = shorten_pair(n.text, n.nearest_text)
        row = [n.custom_id, f"{n.similarity:.3f}", n.reason, text]
        row.append(f"{nearest} ({n.nearest_custom_id})")
        rows.append(row + ([verdict_label(n.verdict)] if r.judged else []))
    return rows


SWEEP_HEADER = [
    "Threshold",
    "Hit rate",
    "Semantic hits",
    "Wrong hits",
    "Wrong-hit rate",
    "Sem. precision",
    "Dollars saved",
    "Net dollars",
    "p99 with cache",
]


#: Columns used when the output is not a terminal (a file or a pipe has no width of its own, and
#: rich's default of 80 truncates the sweep table).
PIPE_WIDTH = 160


def print_report(r: Report, console: Console | None = None, *, title: str = "") -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=PIPE_WIDTH)
    t = Table(title=title or f"cachekit replay ({r.policy}; prices {r.prices})", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    for label, value in summary_rows(r):
        t.add_row(label, value)
    console.print(t)

    for name in ("tenant", "model"):
        if len(r.breakdown.get(name, {})) > 1:
            b = Table(title=f"By {name}")
            for col in (name.capitalize(), "Requests", "Hit rate", "Wrong hits"):
                b.add_column(col, justify="left" if col == name.capitalize() else "right")
            for cells in breakdown_rows(r, name):
                b.add_row(*cells)
            console.print(b)

    cap = r.capacity
    rate = (
        f"rate {_num(cap.rate_rps, ',.2f')} req/s from {cap.rate_source}"
        if cap.rate_source
        else "no request rate: give --rate (or a log with timestamps) for the rates, latencies "
        "and concurrency below"
    )
    c = Table(
        title=f"Capacity ({rate}; upstream concurrency "
        f"{cap.upstream_concurrency if cap.upstream_concurrency else 'unlimited'})"
    )
    for col in ("", "Without cache", "With cache"):
        c.add_column(col, justify="right" if col else "left")
    for row in capacity_rows(r):
        c.add_row(*row)
    console.print(c)
    if cap.concurrency_saved is not None:
        console.print(f"Upstream concurrency needed falls by {fmt_pct(cap.concurrency_saved)}.")

    if r.skipped.counts:
        s = Table(title="Skipped lines")
        for col in ("Reason", "Count", "First lines"):
            s.add_column(col)
        for reason, n in sorted(r.skipped.counts.items()):
            s.add_row(reason, f"{n:,}", ", ".join(r.skipped.first_lines.get(reason, [])))
        console.print(s)

    if r.wrong_sample:
        w = Table(title="Wrong hits (sample)")
        for col in ("Request", "Similarity", "Its text", "Served text (from)"):
            w.add_column(col, overflow="fold")
        for h in r.wrong_sample:
            w.add_row(
                h.custom_id,
                similarity_cell(h.similarity, h.rule),
                h.text,
                f"{h.served_text} ({h.served_custom_id})",
            )
        console.print(w)

    if r.near_sample:
        near = Table(title="Refused near misses (sample)")
        for col in near_header(r):
            near.add_column(col, overflow="fold")
        for cells in near_rows(r):
            near.add_row(*cells)
        console.print(near)

    if r.sweep:
        sw = Table(title=f"Sweep ({r.policy.split(':')[0]})")
        for col in SWEEP_HEADER:
            sw.add_column(col, justify="right")
        for cells in sweep_rows(r):
            sw.add_row(*cells)
        console.print(sw)
    line = recommended_line(r)
    if line:
        console.print(line)
