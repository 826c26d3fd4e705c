"""lis-tui: a language model at work inside a rootless sandbox.

Packages by concern, each importing only those below it: config/ (settings, trust), model/
(the model client), agent/ (the loop, events, trajectory), runs/ (past runs, resume, a run's
changes), app/ (the Textual TUI, the only package that imports textual), servers/ (MCP, the
scripted model server), commands/ (one module per subcommand), bench/, rl/ and ray/ (batch,
RL and cluster runs); at the top cli.py, api.py and conversation.py.

May import: isolation, tools.
"""
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy, so `import lis_tui` (and `lis-tui --help`) stays cheap: the API pulls in openai.
    if name in ("run_task", "RunResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'lis_tui' has no attribute {name!r}")
