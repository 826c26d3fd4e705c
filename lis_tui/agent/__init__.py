"""The agent: the ReAct loop of the LLM-in-Sandbox paper and what it says while it runs.

loop (the `Agent`: a step is one model call, then its tool calls), errors (the control flow:
exceptions that carry what to tell the model, or why the run ends), events (what the loop tells
a listener, and how a person answers), protocols (the model, tools and conversation shape it is
duck-typed against), shapes (the conversation's shape: the paper harness's and lis-tui's),
compaction (older steps into a summary at the context limit), observation (tool results as the
paper words them), trajectory (what a run leaves behind),
instructions (AGENTS.md), allow_words (how each program tells its user to allow the network).

May import: isolation, tools, lis_tui.model, lis_tui.config, lis_tui.prompts. Never the app,
the commands or the batch runners: they import the agent.
"""
