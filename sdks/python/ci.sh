#!/usr/bin/env bash
# Installs the Python worker SDK into a fresh virtual environment and runs its tests against a
# real `sutra serve`. Usage: sdks/python/ci.sh [SUTRA_BIN] (default: target/release/sutra of
# this repository, or $SUTRA_BIN). Exits non-zero when a test fails; bounded to 300 s.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${1:-${SUTRA_BIN:-$repo/target/release/sutra}}"
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
if [ ! -x "$bin" ]; then
    echo "sdks/python/ci.sh: no sutra binary at $bin (build it, or pass its path)" >&2
    exit 2
fi

venv="$(mktemp -d "${TMPDIR:-/tmp}/sutra-py-sdk.XXXXXX")"
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here" pytest
cd "$here"
SUTRA_BIN="$bin" timeout 300 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
