"""Servers lis-tui runs for others: `lis-tui mcp` and the scripted model server.

mcp (a sandbox for any MCP client over the official `mcp` SDK, with our tools and limits),
scripted (an OpenAI-compatible server on loopback that answers from a script: the tests' model,
and `lis-tui fake-server` for a person without a model yet). The RL environment server is
lis_tui.rl.server, beside the environments it serves.

May import: isolation, tools, lis_tui.agent. Nothing imports them but the commands and tests.
"""
