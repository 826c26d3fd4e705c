"""Small semantic widgets of the TUI.

May import: textual, tools.terminal_text, isolation.spec and .rootfs (what a panel shows),
lis_tui.agent.events; never a screen.
"""
