#!/bin/sh
# Build stage: a C compiler for the enforcement library (setup.py runs plain `cc`).
set -eu
if ! command -v cc >/dev/null 2>&1; then
    apt-get update
    apt-get install -y --no-install-recommends gcc libc6-dev
    rm -rf /var/lib/apt/lists/*
fi
