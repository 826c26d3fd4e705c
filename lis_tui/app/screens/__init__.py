"""The TUI's screens, each with a sibling .tcss file where it needs one.

May import: lis_tui.app.widgets and what app/ may (see lis_tui/app/__init__.py).
"""
