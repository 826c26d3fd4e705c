"""What a sandbox changed in a workspace, and how it reaches the host only when a person asks.

workspace (review and apply from the overlay's upper directory), heldback (what would configure
or run something on the host once applied: held back until named, decided by what git, a venv or
a test runner would run), hostgit (the host's own git read for that: hooks, fsmonitor, ignores),
gitpatch (the changes as a patch `git apply` takes, so they outlive the sandbox), beside (the
large files and old contents kept beside that patch), patchapply (that patch applied later under
the same rules), threeway (git's 3-way apply of it, in a scratch copy), gitbundle (a commit made
inside comes home as a commit).

May import: isolation.spec, isolation.host. Every write goes through host/'s descriptor walks.
"""
