#!/usr/bin/env bash
# Set up lis-tui in ./.venv. Idempotent: run it again after a pull.
#   ./install.sh         the tool
#   ./install.sh --dev   the tool and what its tests need (the [paper] and [ifbench] scorers and Ray too)
#   ./install.sh --ray   the tool and Ray, for bench/rollout --ray (run it on every node)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"

dev=0
ray=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    --ray) ray=1 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m==>\033[0m %s\n' "$*"; }

# System packages: util-linux (unshare, which mmdebstrap uses), mmdebstrap + uidmap to build rootfs,
# python3-venv for the virtual environment, tmux and curl/git for the tests.
packages=(util-linux mmdebstrap uidmap python3-venv)
[ "$dev" = 1 ] && packages+=(tmux curl git)
if command -v dpkg-query >/dev/null; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    can=1; sudo=()
    if [ "$(id -u)" != 0 ]; then
      if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo=(sudo -n); else can=0; fi
    fi
    if [ "$can" = 1 ]; then
      say "installing system packages: ${missing[*]}"
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      say "missing system packages: ${missing[*]}; install them with:"
      echo "    sudo apt-get install -y ${missing[*]}"
    fi
  fi
else
  say "not a Debian/Ubuntu system: install util-linux, mmdebstrap and uidmap (newuidmap) with your package manager"
fi

python=""
for candidate in python3.13 python3.12 python3.11 python3.10 python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    python=$candidate; break
  fi
done
[ -n "$python" ] || { echo "install.sh: lis-tui needs Python 3.10 or newer; install it and run again" >&2; exit 1; }

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys' 2>/dev/null; then
  say "creating .venv with $python"
  rm -rf .venv
  "$python" -m venv .venv || { echo "install.sh: '$python -m venv' failed; on Debian/Ubuntu: sudo apt-get install python3-venv" >&2; exit 1; }
fi
say "installing lis-tui into .venv"
# pip's progress and its build backend's notices go to a log, shown only when pip fails.
log=$(mktemp "${TMPDIR:-/tmp}/lis-install.XXXXXX")
trap 'rm -f "$log"' EXIT
.venv/bin/python -m pip install -q --upgrade pip >"$log" 2>&1 || true  # an old pip still works
extras=()
[ "$dev" = 1 ] && extras+=(dev paper ray ifbench)
[ "$ray" = 1 ] && [ "$dev" = 0 ] && extras+=(ray)
if [ "${#extras[@]}" -gt 0 ]; then target=".[$(IFS=,; echo "${extras[*]}")]"; else target="."; fi
if ! .venv/bin/python -m pip install -q -e "$target" >"$log" 2>&1; then
  cat "$log" >&2
  echo "install.sh: 'pip install -e $target' failed (its output is above); fix that and run ./install.sh again" >&2
  exit 1
fi
.venv/bin/python -c 'import lis_tui, isolation, tools' || { cat "$log" >&2; echo "install.sh: the install did not take; see pip's output above" >&2; exit 1; }

say "lis-tui doctor"
code=0
.venv/bin/lis-tui doctor || code=$?
if [ "$code" = 0 ]; then
  say "try next: source .venv/bin/activate   (puts lis-tui on PATH in this shell), then: lis-tui exec -- uname -a   (a sandbox), then: lis-tui   (the app; it asks for a model server)"
else
  say "fix what doctor names above, then: source .venv/bin/activate   (puts lis-tui on PATH in this shell), check again: lis-tui doctor   and try: lis-tui exec -- uname -a"
fi
exit "$code"
