"""The reports of a bench run: `summary.md`, a table for the terminal, and `report.html`.

Names that come from the task file or results.jsonl (domains, modes, the title) are written with
`md_text`: a Markdown renderer, the terminal and `charts.markdown_to_html` all show them as written.
"""
from __future__ import annotations

import datetime
import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

from lis_tui.bench.report.capability import KINDS
from lis_tui.bench.report.charts import bar_chart, episodes_html, markdown_to_html, page
from lis_tui.bench.report.episode_page import write_episode_pages
from lis_tui.bench.report.summary import TOKEN_KINDS, model_tokens, summarize
from tools.terminal_text import safe_terminal_text

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&#!])")


def write_reports(records: list[dict[str, Any]], output: Path, title: str = "",
                  run: dict[str, str] | None = None, preface: str = "",
                  not_run: list[str] | None = None) -> dict[str, Any]:
    """Write summary.md, summary.json and report.html into `output`; returns the summary.
    `run`: what the report's head names (model, server, date), see `run_info`; `preface`:
    Markdown shown before the tables (a paper suite's settings, the paper's main table);
    `not_run`: the keys of the episodes an interruption left out."""
    summary = summarize(records)
    summary["title"] = title
    summary["run"] = run or {}
    summary["preface_md"] = preface
    summary["not_run"] = list(not_run or ())
    (output / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    (output / "summary.md").write_text(markdown(summary), encoding="utf-8")
    pages = write_episode_pages(records, output)
    (output / "report.html").write_text(html(summary, records, pages), encoding="utf-8")
    return summary


def run_info(model: str, base_url: str) -> dict[str, str]:
    """The report's head: the model, its server without any credentials, and the time now."""
    return {"model": model or "(server default)", "server": public_url(base_url),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def public_url(url: str) -> str:
    """`url` without user, password, query or fragment: a report is shared, keys must not be."""
    try:
        parts = urllib.parse.urlsplit(url or "")
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unparsable URL)"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown tables (also what the terminal shows)."""
    if not summary["episodes"]:
        return (f"# lis-tui bench\n\n{summary.get('preface_md', '')}No episodes finished yet.\n"
                + _not_run(summary))
    title = md_text(summary.get("title") or "lis-tui bench")
    return f"# {title}\n\n{_head(summary)}" + tables(summary)


def tables(summary: dict[str, Any]) -> str:
    """The body of the summary: episode count, tables and notes, without title or head."""
    parts = [summary.get("preface_md", ""), f"{summary['episodes']} episodes.\n",
             _group_table(summary), _accuracy_table(summary),
             _mode_table(summary), _capability_table(summary), _error_table(summary),
             "".join(f"Note: {md_note(n)}\n" for n in summary.get("notes") or ()),
             _not_run(summary)]
    return "\n".join(p for p in parts if p)


def _not_run(summary: dict[str, Any], shown: int = 20) -> str:
    """The episodes an interruption left out, so a partial run is not read as a whole one."""
    keys = summary.get("not_run") or []
    if not keys:
        return ""
    names = ", ".join(md_text(k.replace("|", " ")) for k in keys[:shown])
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return (f"## Not run\n\nInterrupted: {len(keys)} episode{'s' * (len(keys) != 1)} did not run "
            f"({names}{more}); `--resume` with the same `--output` runs them.\n")


def _head(summary: dict[str, Any]) -> str:
    run = summary.get("run") or {}
    named = [f"{label}: {md_text(run[key])}" for key, label in
             (("model", "Model"), ("server", "Server"), ("date", "Date")) if run.get(key)]
    return "".join(f"{line}\n" for line in named) + ("\n" if named else "")


def _group_table(s: dict[str, Any]) -> str:
    """One row per suite (or domain): each mode's accuracy, the gap, tokens per mode and their
    ratio, and what the sandbox was used for: the paper's tables, side by side."""
    modes = [m for m in ("sandbox", "llm") if m in s["modes"]]
    if not modes:
        return ""
    by, both = s["group_by"], len(modes) == 2  # one mode: no gap or ratio columns, all "-"
    kinds = KINDS if "sandbox" in modes else ()  # nor capability columns without a sandbox
    header = [by, *(f"{m} acc" for m in modes), *["sandbox − llm"] * both, *(f"{m} score" for m in modes),
              *(f"{m} tokens" for m in modes), *["tokens ratio", "trajectory ratio"] * both,
              *(k.replace("_", " ") for k in kinds)]
    rows = []
    for name, g in s["groups"].items():
        got = g["modes"]
        box = got.get("sandbox")
        rows.append([md_text(name),
                     *(_n_pct(got[m]) if m in got else "-" for m in modes),
                     *[_pts(g.get("accuracy_delta"))] * both,
                     *(f"{got[m]['mean_reward']:.3f}" if m in got else "-" for m in modes),
                     *(f"{got[m]['total_tokens']:,.0f}" if m in got else "-" for m in modes),
                     *[_times(g.get("token_ratio")), _times(g.get("trajectory_ratio"))] * both,
                     *(_pct(box["capability"][k]) if box else "-" for k in kinds)])
    # A title promising a comparison that one mode cannot make would mislead: say which ran.
    title = f"Per {by}: sandbox against LLM" if both else \
        f"Per {by}: {modes[0]} mode only (`--mode both` compares sandbox and llm)"
    ratio = ("; ratio: sandbox / llm (the paper reports 0.5-0.8x, and up to 8x fewer on long "
             "context). trajectory ratio: the same for the whole conversation counted once, the "
             "last call's prompt and reply (each mode's value is in summary.json)") if both else ""
    capability = (" Capability columns: share of sandbox steps that computed, managed files or "
                  "fetched external resources.") if kinds else ""
    return (f"## {title}\n\n" + _table(header, rows) +
            "\nacc: share of episodes scored correct. score: mean reward, the paper's headline "
            "number (partial credit counts: F1, ROUGE-L). tokens: prompt + completion over all "
            f"model calls, mean per episode{ratio}.{capability}\n")


def _n_pct(mode: dict) -> str:
    return f"{_pct(mode['accuracy'])} (n={mode['episodes']})"


def _pts(delta: float | None) -> str:
    return "-" if delta is None else f"{100 * delta:+.1f} pts"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def md_text(text: object) -> str:
    """`text` for one line or table cell of Markdown: controls visible, one line, and every
    character Markdown or HTML would act on (`<`, `|`, `*`, `[`, ...) backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", safe_terminal_text(str(text)).replace("\n", " "))


_CODE = re.compile(r"`([^`\n]+)`")


def md_note(text: object) -> str:
    """A note as Markdown: its `code` spans (the commands a note names) as code, so a copied
    command is the command, not `'/path\\[paper\\]'`; the rest as `md_text`."""
    parts = _CODE.split(safe_terminal_text(str(text)).replace("\n", " "))
    return "".join(md_text(part) if n % 2 == 0 else _code_span(part) for n, part in enumerate(parts))


def _code_span(text: str) -> str:
    """`text` as a Markdown code span; nothing in it acts (a backtick in it cannot close it)."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if text[:1] == "`" or text[-1:] == "`" else f"{fence}{text}{fence}"


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
            cells.append(_pts(delta))
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


def _error_table(s: dict[str, Any], width: int = 200) -> str:
    rows = [[md_text(m), md_text(kind), str(n), md_text(_clip(p.get("error_reasons", {}).get(kind, ""), width))]
            for m, p in s["per_mode"].items() for kind, n in sorted(p["errors"].items())]
    if not rows:
        return "## Errors\n\nNone: every episode submitted an answer.\n"
    return ("## Errors, stops and missing answers\n\n" + _table(["mode", "kind", "episodes", "why (the most common)"], rows)
            + "\nEach episode's reason is its `message` in results.jsonl.\n")


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def html(summary: dict[str, Any], records: list[dict[str, Any]] | None = None,
         pages: dict[str, str] | None = None) -> str:
    """One self-contained HTML page: the head (title, model, server, date), inline SVG bar
    charts, the tables, and every episode with links to its page (`pages`, from
    `write_episode_pages`) and its trajectory's JSON."""
    title = summary.get("title") or "lis-tui bench"
    if not summary["episodes"]:
        return page(title, summary.get("run") or {}, "", "<p>No episodes finished yet.</p>")
    per, modes = summary["per_mode"], summary["modes"]
    groups = summary["groups"]
    charts = [
        bar_chart(f"Accuracy per {summary['group_by']}", list(groups) + ["overall"],
                  {m: [g["modes"].get(m, {}).get("accuracy", 0.0) for g in groups.values()]
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
    body = markdown_to_html(tables(summary)) + episodes_html(records or [], pages)
    return page(title, summary.get("run") or {}, "\n".join(charts), body)
