"""The spawn helper's entry point: `python -I -S helper.py FD OWNER` (spawn._Helper starts it).

Its code is forks.py, loaded as a module, from its cached bytecode: compiled here, as this
script, it left about a MiB more in the helper's heap, which every fork of it copies and unmaps.
Standard library only, imported by path.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forks  # noqa: E402

IDLE = forks.IDLE

if __name__ == "__main__":
    forks.main(int(sys.argv[1]))
