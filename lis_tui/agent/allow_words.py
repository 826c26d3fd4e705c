"""How each program tells its user to allow what the network refused, for isolation.net.AllowWords:
the model reads it in the proxy's 403 and in the shell tool's result (tools.network_notes), and
passes it on to the person, who must be able to act on it where they are."""

RUN = {
    "turn_on": "the user can turn it on with `--network on`, or with `--network ask --allow-host {host}`",
    "allow_host": "the user can allow it with `--allow-host {host}` or `--network on`",
    "allow_service": "the user can allow exactly this service with `--allow-host {host}:{port}`",
}
"""`lis-tui run`: its flags (no one is there to ask while it runs)."""

APP = {
    "turn_on": "the user can turn it on with F2 in the app (network ASK or ON)",
    "allow_host": "the user can allow it when the app asks (network ASK, F2), or turn the network ON with F2",
    "allow_service": "the user can allow exactly this service by starting lis-tui with `--allow-host {host}:{port}`",
}
"""The app: the network key (F2) and its question."""

MCP = {
    "turn_on": "the user can restart this MCP server (`lis-tui mcp`) with `--network on`, or with "
               "`--allow-host {host}` and `--network ask`",
    "allow_host": "the user can restart this MCP server (`lis-tui mcp`) with `--allow-host {host}` or "
                  "`--network on`",
    "allow_service": "the user can restart this MCP server (`lis-tui mcp`) with `--allow-host {host}:{port}` "
                     "to allow exactly this service",
}
"""`lis-tui mcp`: the server's flags; its client has no network key, and may have no way to ask."""


def allow_words(program: dict):
    """The isolation.net.AllowWords for `program` (RUN, APP or MCP)."""
    from isolation.net import AllowWords  # noqa: PLC0415 (the proxy's package loads with a sandbox)

    return AllowWords(**program)
