#!/bin/sh
# Build stage: gpugov's wheel (with libgpugov.so) and the wheels of its dependencies.
# usage: build-wheels.sh SOURCE_DIR WHEEL_DIR
set -eu
src=$1
out=$2
tmp=$(mktemp -d)
python3 -m venv "$tmp/venv"
"$tmp"/venv/bin/pip wheel --no-deps --wheel-dir "$out" "$src"
"$tmp"/venv/bin/pip wheel --wheel-dir "$out" "$out"/gpugov-*.whl
# the wheel must carry the enforcement library, or the node agent has nothing to inject
"$tmp"/venv/bin/python -m zipfile -l "$out"/gpugov-*.whl | grep -q 'gpugov/_native/libgpugov.so'
rm -rf "$tmp"
