"""The reports of a bench run: `summary.md`, a table for the terminal, and `report.html`.

Names that come from the task file or results.jsonl (domains, modes, the title) are written with
`md_text`: a Markdown renderer, the terminal and `charts.markdown_to_html` all show them as written.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from lis_tui.bench.capability import KINDS
from lis_tui.bench.charts import bar_chart, page
from lis_tui.bench.summary import TOKEN_KINDS, model_tokens, summarize
from tools.terminal_text import safe_terminal_text

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&#!])")


def write_reports(records: list[dict[str, Any]], output: Path, title: str = "") -> dict[str, Any]:
    """Write summary.md, summary.json and report.html into `output`; returns the summary."""
    summary = summarize(records)
    summary["title"] = title
    (output / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    (output / "summary.md").write_text(markdown(summary), encoding="utf-8")
    (output / "report.html").write_text(html(summary), encoding="utf-8")
    return summary


def markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown tables (also what the terminal shows)."""
    if not summary["episodes"]:
        return "# lis-tui bench\n\nNo episodes finished yet.\n"
    title = md_text(summary.get("title") or "lis-tui bench")
    parts = [f"# {title}\n\n{summary['episodes']} episodes.\n", _accuracy_table(summary),
             _mode_table(summary), _capability_table(summary), _error_table(summary),
             "".join(f"Note: {md_text(n)}\n" for n in summary.get("notes") or ())]
    return "\n".join(p for p in parts if p)


def md_text(text: object) -> str:
    """`text` for one line or table cell of Markdown: controls visible, one line, and every
    character Markdown or HTML would act on (`<`, `|`, `*`, `[`, ...) backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", safe_terminal_text(str(text)).replace("\n", " "))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _accuracy_table(s: dict[str, Any]) -> str:
    modes, per = s["modes"], s["per_mode"]
    both = "comparison" in s
    header = ["domain"] + [md_text(m) for m in modes] + (["sandbox − llm"] if both else [])
    rows = []
    for domain in s["domains"] + ["overall"]:
        cells = [_domain_cell(per[m], domain) for m in modes]
        if both:
            delta = s["comparison"]["accuracy_delta"] if domain == "overall" else \
                s["comparison"]["domain_delta"].get(domain)
            cells.append("-" if delta is None else f"{100 * delta:+.1f} pts")
        rows.append([f"**{domain}**" if domain == "overall" else md_text(domain)] + cells)
    return "## Accuracy\n\n" + _table(header, rows)


def _domain_cell(mode: dict, domain: str) -> str:
    if domain == "overall":
        return f"{_pct(mode['accuracy'])} (n={mode['episodes']})"
    found = mode["domains"].get(domain)
    return f"{_pct(found['accuracy'])} (n={found['episodes']})" if found else "-"


def _mode_table(s: dict[str, Any]) -> str:
    rows = [[md_text(m), str(p["episodes"]), f"{p['mean_steps']:.1f}",
             *(f"{p['tokens'][k]:,.0f}" for k in TOKEN_KINDS), f"{p['wall_time']:.2f}"]
            for m, p in s["per_mode"].items()]
    text = "## Steps, tokens and time (per episode)\n\n" + _table(
        ["mode", "episodes", "steps", "prompt tokens", "completion tokens", "environment tokens",
         "wall s"], rows)
    ratio = s.get("comparison", {}).get("token_ratio")
    if ratio is not None:
        text += (f"\nsandbox / llm model tokens (prompt + completion): {ratio:.2f}x "
                 f"({model_tokens(s['per_mode']['sandbox']):,.0f} vs "
                 f"{model_tokens(s['per_mode']['llm']):,.0f})\n")
    return text


def _capability_table(s: dict[str, Any]) -> str:
    rows = [[md_text(m)] + [f"{_pct(p['capability'][k])} of steps, "
                            f"{_pct(p['capability_episodes'][k])} of episodes" for k in KINDS]
            for m, p in s["per_mode"].items() if m != "llm"]
    if not rows:
        return ""
    return "## Capability use\n\n" + _table(["mode"] + [k.replace("_", " ") for k in KINDS], rows)


def _error_table(s: dict[str, Any]) -> str:
    rows = [[md_text(m), md_text(kind), str(n)] for m, p in s["per_mode"].items()
            for kind, n in sorted(p["errors"].items())]
    if not rows:
        return "## Errors\n\nNone: every episode submitted.\n"
    return "## Errors and stops (not submitted)\n\n" + _table(["mode", "kind", "episodes"], rows)


def html(summary: dict[str, Any]) -> str:
    """One self-contained HTML page: the tables and inline SVG bar charts."""
    if not summary["episodes"]:
        return page("lis-tui bench", "<p>No episodes finished yet.</p>", "")
    per, modes = summary["per_mode"], summary["modes"]
    charts = [
        bar_chart("Accuracy per domain", summary["domains"] + ["overall"],
                  {m: [per[m]["domains"].get(d, {}).get("accuracy", 0.0) for d in summary["domains"]]
                   + [per[m]["accuracy"]] for m in modes}, percent=True),
        bar_chart("Tokens per episode", [k for k in TOKEN_KINDS],
                  {m: [per[m]["tokens"][k] for k in TOKEN_KINDS] for m in modes}),
    ]
    sandboxed = [m for m in modes if m != "llm"]
    if sandboxed:
        charts.append(bar_chart("Capability use (share of steps)",
                                [k.replace("_", " ") for k in KINDS],
                                {m: [per[m]["capability"][k] for k in KINDS] for m in sandboxed},
                                percent=True))
    return page(summary.get("title") or "lis-tui bench", markdown(summary), "\n".join(charts))
