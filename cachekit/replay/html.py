"""One self-contained HTML file for a replay report: tables and inline SVG plots.

Nothing is loaded from the network when the file is opened (no scripts, fonts or images from
elsewhere): the plots are matplotlib SVG with text drawn as paths.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cachekit.replay.render import (
    SWEEP_HEADER,
    breakdown_rows,
    capacity_rows,
    fmt_pct,
    near_header,
    near_rows,
    recommended_line,
    similarity_cell,
    summary_rows,
    sweep_rows,
)
from cachekit.replay.report import Report

__all__ = ["capacity_svg", "render_html", "sweep_svg", "write_html"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}
td,th{border:1px solid #ddd;padding:.3em .6em;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:.9em}svg{max-width:100%;height:auto}
td.sub{padding-left:1.8em}td.id{white-space:nowrap}tr.mark td{font-weight:600;background:#fffbe6}
"""


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    # Drop the XML prolog and DOCTYPE: the SVG is inlined into HTML.
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "path"  # no font files needed to render
    import matplotlib.pyplot as plt

    return plt


def sweep_svg(r: Report) -> str:
    """Hit rate and net savings against the wrong-hit rate, one point per setting (or against
    the setting when there is no truth file)."""
    plt = _pyplot()
    pts = [p for p in r.sweep if p.threshold is not None]
    judged = all(p.judged for p in pts)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = [100 * (p.wrong_hit_rate or 0.0) for p in pts] if judged else [p.threshold for p in pts]
    xlabel = "wrong hits (% of requests)" if judged else "threshold"
    a.plot(x, [100 * p.hit_rate for p in pts], "o-", color="#1f77b4")
    a.set_ylabel("hit rate (% of requests)")
    gross = [p.to_dict(with_sweep=False)["dollars_saved"]["total"] for p in pts]
    b.plot(x, gross, "s--", color="#999999", label="dollars saved")
    if judged:
        net = [p.to_dict(with_sweep=False)["net_dollars_saved"]["total"] for p in pts]
        b.plot(x, net, "o-", color="#2ca02c", label="net of wrong hits")
    b.set_ylabel("dollars saved")
    b.legend(loc="best")
    for ax in (a, b):
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    for i, p in enumerate(pts):
        if judged and (i % 2 == 0 or i == len(pts) - 1):
            a.annotate(
                f"{p.threshold:.2f}",
                (x[i], 100 * p.hit_rate),
                fontsize=7,
                textcoords="offset points",
                xytext=(4, -10),
            )
    fig.suptitle(f"{r.policy.split(':')[0]} sweep: labels are the setting")
    out = _svg(fig)
    plt.close(fig)
    return out


def capacity_svg(r: Report) -> str | None:
    """p99 end-to-end latency as the traffic grows, with and without the cache."""
    curve = r.capacity.curve
    if not curve:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    k = [c[0] for c in curve]
    for idx, label, color in ((1, "without cache", "#d62728"), (2, "with cache", "#1f77b4")):
        ys = [float("nan") if v is None else v / 1000.0 for v in (c[idx] for c in curve)]
        ax.plot(k, ys, "-", color=color, label=label)
    ax.axvline(1.0, color="#555", ls=":", lw=1, label="logged traffic")
    finite = [v for c in curve for v in c[1:] if v is not None]
    if finite:
        # Past the knee the curve leaves any useful scale: show up to 4x its calmest p99.
        ax.set_ylim(0, 4 * min(finite) / 1000.0)
    ax.set_xlabel("traffic (x the logged rate)")
    ax.set_ylabel("p99 end-to-end latency (s)")
    ax.set_title(f"upstream concurrency {r.capacity.upstream_concurrency}")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    out = _svg(fig)
    plt.close(fig)
    return out


def _table(
    header: Sequence[str] | None,
    rows: Sequence[Sequence[str]],
    *,
    numeric: bool = True,
    marked: int | None = None,
) -> str:
    """Rows of strings; the first column is a label (indented as the terminal table indents
    it; never wrapped in a table of ids), the rest right-aligned when ``numeric``. Row
    ``marked`` is highlighted."""
    cls = ' class="n"' if numeric else ""
    parts = ["<table>"]
    if header:
        parts.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
    for i, row in enumerate(rows):
        label = row[0]
        first = ' class="sub"' if label.startswith(" ") else "" if numeric else ' class="id"'
        cells = [f"<td{first}>{html.escape(label.strip())}</td>"]
        cells += [f"<td{cls}>{html.escape(v)}</td>" for v in row[1:]]
        tr = '<tr class="mark">' if i == marked else "<tr>"
        parts.append(tr + "".join(cells) + "</tr>")
    parts.append("</table>")
    return "".join(parts)


def _sections(r: Report) -> list[str]:
    out = [f"<h2>Summary</h2>{_table(None, summary_rows(r))}"]
    for name in ("tenant", "model"):
        rows = breakdown_rows(r, name)
        if len(rows) > 1:
            head = [name.capitalize(), "Requests", "Hit rate", "Wrong hits"]
            out.append(f"<h2>By {name}</h2>{_table(head, rows)}")
    cap = r.capacity
    rate = (
        "unknown: the log has no timestamps; pass --rate RPS for the capacity figures"
        if cap.rate_rps is None
        else f"{cap.rate_rps:,.2f} req/s ({cap.rate_source})"
    )
    conc = cap.upstream_concurrency or "unlimited"
    out.append(
        f"<h2>Capacity</h2><p class='note'>Rate {html.escape(rate)}; upstream "
        f"concurrency {conc}. Little's law L = &lambda;W; latency percentiles from M/M/c "
        f"queueing at that utilisation; the knee is where queueing adds 10% to the p99 "
        f"of upstream calls.</p>" + _table(["", "Without cache", "With cache"], capacity_rows(r))
    )
    if cap.concurrency_saved is not None:
        out.append(
            f"<p>Upstream concurrency needed falls by "
            f"{html.escape(fmt_pct(cap.concurrency_saved))}.</p>"
        )
    svg = capacity_svg(r)
    if svg:
        out.append(svg)
    if r.sweep:
        mark = headline_row(r)
        note = (
            "<p class='note'>The highlighted row is the setting of the headline figures above "
            f"({html.escape(r.policy)}).</p>"
            if mark is not None
            else ""
        )
        out.append(
            "<h2>Sweep</h2>"
            + sweep_svg(r)
            + note
            + _table(SWEEP_HEADER, sweep_rows(r), marked=mark)
        )
    line = recommended_line(r)
    if line:
        out.append(f"<p class='recommended'><strong>{html.escape(line)}</strong></p>")
    if r.wrong_sample:
        rows = [
            [
                h.custom_id,
                similarity_cell(h.similarity, h.rule),
                h.text,
                f"{h.served_text} ({h.served_custom_id})",
            ]
            for h in r.wrong_sample
        ]
        out.append(
            "<h2>Wrong hits (sample)</h2>"
            + _table(
                ["Request", "Similarity", "Its text", "Served text (from)"], rows, numeric=False
            )
        )
    if r.near_sample:
        out.append(
            "<h2>Refused near misses (sample)</h2><p class='note'>Misses whose nearest entry "
            "was refused, and why. With a truth file, a missed paraphrase would have been a "
            "right hit (the refusal cost a saving); a prevented wrong hit would have served "
            "another answer.</p>" + _table(near_header(r), near_rows(r), numeric=False)
        )
    if r.skipped.counts:
        rows = [
            [k, f"{v:,}", ", ".join(r.skipped.first_lines.get(k, []))]
            for k, v in sorted(r.skipped.counts.items())
        ]
        out.append(
            "<h2>Skipped lines</h2>"
            + _table(["Reason", "Count", "First lines"], rows, numeric=False)
        )
    return out


def render_html(r: Report, *, source: str = "") -> str:
    title = "cachekit replay" + (f": {source}" if source else "")
    body = "".join(_sections(r))
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p class='note'>Policy {html.escape(r.policy)}; "
        f"prices {html.escape(r.prices)}.</p>{body}</body></html>"
    )


def write_html(r: Report, path: str | Path, *, source: str = "") -> None:
    Path(path).write_text(render_html(r, source=source), encoding="utf-8")


def headline_row(r: Report) -> int | None:
    """The sweep row at the headline run's setting (``policy:setting``), if the sweep has it."""
    _, sep, value = r.policy.partition(":")
    try:
        setting = float(value) if sep else None
    except ValueError:
        return None
    if setting is None:
        return None
    for i, p in enumerate(r.sweep):
        if p.threshold is not None and abs(p.threshold - setting) < 1e-9:
            return i
    return None
