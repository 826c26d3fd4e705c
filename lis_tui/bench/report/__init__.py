"""What a bench run shows and leaves behind besides results.jsonl.

progress (the live line on stderr), summary (numbers over results.jsonl), capability (what the
model used the sandbox for, as the paper classifies it), pages (`summary.md`, the terminal's
table, `report.html`), charts (inline SVG charts and the page around them), episode_page (each
episode's `trajectory.html`).

May import: tools (names from a task file are shown safely), lis_tui.agent.events and
lis_tui.runs.replay (an episode's page is its trajectory read back as events); nothing of the
runner.
"""
