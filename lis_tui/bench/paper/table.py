"""The paper's main table from a bench summary: per suite, the LLM and LLM-in-Sandbox scores,
the gap, tokens per mode and the sandbox's turns, as the paper sets them side by side."""
from __future__ import annotations

from typing import Any

HEADER = ("suite", "n", "LLM", "LLM-in-Sandbox", "gap", "LLM tokens", "sandbox tokens",
          "sandbox turns")


def main_table(summary: dict[str, Any], not_run: dict[str, str]) -> str:
    """Markdown: the table (scores are mean reward x 100, the paper's headline number; tokens
    are prompt + completion over all model calls, mean per episode; turns are model calls per
    sandbox episode), then each suite that did not run and why."""
    rows = []
    for name, group in (summary.get("groups") or {}).items():
        llm, box = group["modes"].get("llm"), group["modes"].get("sandbox")
        gap = box["mean_reward"] - llm["mean_reward"] if llm and box else None
        rows.append([name, str(max((m["episodes"] for m in (llm, box) if m), default=0)),
                     _score(llm), _score(box), "-" if gap is None else f"{100 * gap:+.1f}",
                     _tokens(llm), _tokens(box), f"{box['mean_steps']:.1f}" if box else "-"])
    rows += [[_md(name), "0", "-", "-", "-", "-", "-", "-"] for name in sorted(not_run)]
    lines = ["## The paper's main table\n", "| " + " | ".join(HEADER) + " |",
             "|" + "---|" * len(HEADER)] + ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines) + ("\n\nScores: mean reward x 100 (partial credit counts). Tokens: "
                               "prompt + completion over all model calls, mean per episode. "
                               "Turns: model calls per sandbox episode.\n")
    if not_run:
        from lis_tui.bench.report.pages import md_text  # noqa: PLC0415 (report imports the charts)

        text += "\nNot run:\n\n" + "".join(f"- {md_text(name)}: {md_text(why)}\n"
                                            for name, why in sorted(not_run.items()))
    return text


def _md(text: str) -> str:
    from lis_tui.bench.report.pages import md_text  # noqa: PLC0415

    return md_text(text)


def _score(mode: dict | None) -> str:
    return "-" if mode is None else f"{100 * mode['mean_reward']:.1f}"


def _tokens(mode: dict | None) -> str:
    return "-" if mode is None else f"{mode['total_tokens']:,.0f}"
