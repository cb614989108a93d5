#!/bin/sh
# Final stage: gpugov and its dependencies into a venv, from the wheels only (no index).
# usage: install.sh WHEEL_DIR VENV_DIR
set -eu
wheels=$1
venv=$2
python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --no-index --find-links "$wheels" gpugov
"$venv/bin/gpugov" --version
