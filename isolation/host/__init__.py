"""Host-side work on trees a sandbox made: every name in them was chosen by a hostile model.

walk (trees walked through directory descriptors, never by path), inroot (files of a running
sandbox read and written from the host as the sandbox would resolve them, `openat2`
RESOLVE_IN_ROOT), copyout (a directory copied out of a running sandbox: `export`, a run's
files/), nodes (the host's device nodes, read-only in every sandbox of a caller that owns them),
owners (what at a workspace's top another user owns: a sandbox cannot change it).

May import: isolation.spec, isolation.idmap, isolation.spawn.
"""
