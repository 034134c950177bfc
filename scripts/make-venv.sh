#!/bin/sh
# Creates the Python virtual environment used by the tests only (never at
# run time): make-venv.sh DIR REQUIREMENTS
set -e
venv="$1"; req="$2"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
