"""Inline SVG bar charts and the self-contained HTML page around them (no scripts, no CDN)."""
from __future__ import annotations

import html as _html
import re
import urllib.parse

from tools.terminal_text import safe_terminal_text

COLOURS = ("#3b6fb6", "#e0823d", "#4a9a5b", "#a44a9a")
_STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;display:block;overflow-x:auto;max-width:100%;
font-size:.92em}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:right;white-space:nowrap}td:first-child,th:first-child{text-align:left}th{background:#f2f2f2;white-space:normal}
svg{margin:1em 0;display:block}.head{color:#555}.head dt{font-weight:bold;float:left;
width:5em}.head dd{margin:0 0 .2em 5em}td.text{text-align:left;max-width:28em;overflow-wrap:anywhere;
white-space:pre-wrap}td.l{text-align:left}"""
ANSWER_SHOWN = 300  # characters of an answer in the episode list; the trajectory has the rest


def bar_chart(title: str, categories: list[str], series: dict[str, list[float]],
              percent: bool = False) -> str:
    """Grouped vertical bars: one group per category, one bar per series."""
    width, height, left, bottom, top = 760, 280, 60, 60, 40
    top_value = 1.0 if percent else max([v for vals in series.values() for v in vals] + [1e-9])
    group = (width - left - 20) / max(len(categories), 1)
    bar = group * 0.8 / max(len(series), 1)
    plot = height - bottom - top
    values = [v for vals in series.values() for v in vals]
    empty = not categories or not values
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" aria-label="{_e(title)}">',
           f'<text x="{left}" y="20" font-size="15" font-weight="bold">{_e(title)}</text>',
           f'<line x1="{left}" y1="{top + plot}" x2="{width - 10}" y2="{top + plot}" stroke="#888"/>']
    if empty or not any(values):  # say so, rather than draw a box that looks broken
        note = "No data" if empty else "All values are 0"
        out.append(f'<text x="{left + (width - left) / 2:.0f}" y="{top + plot / 2:.0f}" '
                   f'font-size="14" fill="#666" text-anchor="middle">{note}</text>')
    for i, category in enumerate(categories):
        x0 = left + i * group + group * 0.1
        out.append(f'<text x="{x0 + group * 0.4:.1f}" y="{top + plot + 18}" font-size="12" '
                   f'text-anchor="middle">{_e(category)}</text>')
        for j, (name, values) in enumerate(series.items()):
            value = values[i] if i < len(values) else 0.0
            h = plot * (value / top_value if top_value else 0)
            x, y = x0 + j * bar, top + plot - h
            label = f"{100 * value:.0f}%" if percent else f"{value:,.0f}"
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar * 0.92:.1f}" height="{h:.1f}" '
                       f'fill="{COLOURS[j % len(COLOURS)]}"><title>{_e(name)}: {label}</title></rect>')
            out.append(f'<text x="{x + bar * 0.46:.1f}" y="{y - 3:.1f}" font-size="10" '
                       f'text-anchor="middle">{label}</text>')
    for j, name in enumerate(series):
        x = left + j * 110
        out.append(f'<rect x="{x}" y="{height - 22}" width="12" height="12" '
                   f'fill="{COLOURS[j % len(COLOURS)]}"/><text x="{x + 16}" y="{height - 12}" '
                   f'font-size="12">{_e(name)}</text>')
    return "\n".join(out + ["</svg>"])


def page(title: str, run: dict[str, str], charts: str, body: str) -> str:
    """A whole HTML document: title and what ran (model, server, date), the charts, the body."""
    head = "".join(f"<dt>{label}</dt><dd>{_e(run[key])}</dd>" for key, label in
                   (("model", "Model"), ("server", "Server"), ("date", "Date")) if run.get(key))
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n"
            f"<h1>{_e(title)}</h1>\n" + (f'<dl class="head">{head}</dl>\n' if head else "") +
            f"{charts}\n{body}\n</body></html>\n")


def episodes_html(records: list[dict], pages: dict[str, str] | None = None) -> str:
    """Every episode: its answer, reward, finish reason and relative links to its page (`pages`:
    trajectory path -> its trajectory.html) and its trajectory's raw JSON."""
    if not records:
        return ""
    rows = []
    for r in sorted(records, key=lambda r: (str(r.get("id")), str(r.get("mode")), r.get("repeat", 0))):
        answer = str(r.get("answer") or "")
        shown = answer[:ANSWER_SHOWN] + ("…" if len(answer) > ANSWER_SHOWN else "")
        path = str(r.get("trajectory") or "")
        link = (f'<a href="{_e(urllib.parse.quote(path))}">trajectory</a>'
                if path and not _outside(path) else "-")
        if (pages or {}).get(path):  # its steps as a page; the JSON a link away
            link = f'<a href="{_e(urllib.parse.quote(pages[path]))}">steps</a> (raw JSON: {link})'
        finish = str(r.get("finish_reason", ""))
        why = " ".join(str(r.get("message") or r.get("reward_error") or "").split())
        finish += f": {why[:ANSWER_SHOWN]}{'…' if len(why) > ANSWER_SHOWN else ''}" if why else ""
        rows.append(f"<tr><td>{_e(r.get('id', ''))}</td><td class=\"l\">{_e(r.get('mode', ''))}</td>"
                    f"<td>{_e(r.get('repeat', 0))}</td><td class=\"text\">{_e(shown)}</td>"
                    f"<td>{float(r.get('reward', 0.0)):.2f}</td>"
                    f"<td class=\"text\">{_e(finish)}</td><td class=\"l\">{link}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in
                   ("id", "mode", "repeat", "answer", "reward", "finish", "trajectory"))
    return (f"<h2>Episodes</h2>\n<table><thead><tr>{head}</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _outside(path: str) -> bool:
    """A link that would leave the run's folder (results.jsonl is data, it may be edited)."""
    return path.startswith(("/", "\\")) or ".." in path.split("/") or ":" in path


def markdown_to_html(text: str) -> str:
    """The small Markdown our summary uses: headings, tables, paragraphs, **bold**, `code`, and
    the backslash escapes of `report.md_text`."""
    out, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append(line)
            continue
        if rows:
            out.append(_table_html(rows))
            rows = []
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    return "\n".join(out)


def _table_html(rows: list[str]) -> str:
    cells = [[c.strip() for c in _CELL.findall(r.strip()[1:])] for r in rows
             if not re.fullmatch(r"\|(-+\|)+", r.strip())]
    head = "".join(f"<th>{_inline(c)}</th>" for c in cells[0])
    body = "".join("<tr>" + "".join(f"<td{_align(c)}>{_inline(c)}</td>" for c in row) + "</tr>"
                   for row in cells[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_NUMBER = re.compile(r"[-+~]?[\d.,]+(?:%|x| pts)?(?: \(n=\d+\))?$|-$")  # right-aligned; text goes left
def _align(cell: str) -> str:
    """Numbers stay right-aligned (the stylesheet's default); text goes left."""
    return "" if _NUMBER.match(cell) else ' class="l"'


_CELL = re.compile(r"((?:\\.|[^\\|])*)\|")  # a cell ends at a `|` that is not escaped
_INLINE = re.compile(r"\\(.)|(`+)(.+?)(?<!`)\2(?!`)|(\*\*)|([^\\*`]+|.)", re.S)


def _inline(text: str) -> str:
    """`\\X` is X as written; a `code` span is code (a command to copy); `**` opens or closes
    bold; the rest is text."""
    out, bold = [], False
    for escaped, _, code, star, rest in _INLINE.findall(text):
        if code:
            out.append(f"<code>{_e(code.strip() or code)}</code>")
        elif star:
            out.append("</b>" if bold else "<b>")
            bold = not bold
        else:
            out.append(_e(escaped or rest))
    return "".join(out) + ("</b>" if bold else "")


def _e(text: str) -> str:
    """Text for HTML: escaped, and its control characters visible as in a terminal."""
    return _html.escape(safe_terminal_text(str(text)), quote=True)
