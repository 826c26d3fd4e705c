"""Past runs: where they are kept, finding one, continuing one, and what it changed.

store (run folders, ids and `lis-tui runs`), resume (a past run's conversation back to the
model), restore (its `changes.patch` and files put back INSIDE a fresh sandbox, never on the
host), changes (a run's workspace changes kept as `changes.patch` beside it, and applied on the
host only when a person asks), replay (a saved trajectory read back as the events the agent sent).

May import: isolation, lis_tui.agent, lis_tui.model. Not the app: the app shows runs.
"""
