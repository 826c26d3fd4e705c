"""The model side: chat completions against any OpenAI-compatible server, and what a reply holds.

client (`ModelClient`: retries, usage, streaming, cancel), reply (text, reasoning, tool calls and
usage, assembled from a reply or a stream), tool_formats (native, hermes or text tool calls),
textcalls (tool calls read from what a trainer's model wrote), tokens (local counts for servers
that report none), discover (model servers running on this machine, and whether one answers).

May import: tools, lis_tui.config. Not the agent: the agent holds a model, never the reverse.
"""
