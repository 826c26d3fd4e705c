"""Settings and what may change them: files, the environment, profiles, flags, and trust.

settings (the `Config` dataclasses and how the layers are read, later ones winning), toml_text
(TOML parsed with line numbers in its errors, and a key set in place), workspace (`[workspace]`:
how a host folder laid over /testbed may be changed), trust (a project's `lis-tui.toml` is read
only once the user trusted it: a sandbox could have written it).

May import: isolation (the spec, limits and network types a setting names), tools. Nothing else
of lis_tui: every other package reads its settings from here.
"""
