"""The subcommands of `lis-tui`, one module each: its `add_parsers(subparsers)` (or `add_parser`)
registers them, and every handler, stored as `func` in the parsed arguments, returns an exit code.

May import: every other lis_tui package, tools and isolation; nothing imports commands but
cli.py and, lazily for two things (a live run's words, an interactive shell), app/.
"""
