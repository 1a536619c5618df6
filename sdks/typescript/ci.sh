#!/usr/bin/env bash
# CI for the TypeScript worker SDK (sdks/typescript):
#   1. `npm install <this directory>` into an empty project works with no further step, and so
#      does installing the packed files (what a registry or a git dependency would hand out);
#      the package and its type declarations resolve from there;
#   2. the declarations type-check against test/types.ts (TypeScript, a devDependency pinned
#      in package-lock.json: the one step that needs the npm registry);
#   3. the tests run against a real `sutra serve`.
#
#   sdks/typescript/ci.sh [SUTRA_BIN]     # default: ../../target/release/sutra from here
#
# Bounded: the whole script runs under `timeout 300`. Non-zero on any failure.
set -euo pipefail

if [ -z "${SUTRA_SDK_TS_CI_TIMED:-}" ]; then
  SUTRA_SDK_TS_CI_TIMED=1 exec timeout 300 "$0" "$@"
fi

here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-${SUTRA_BIN:-$here/../../target/release/sutra}}"
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
if [ ! -x "$bin" ]; then
  echo "sdks/typescript/ci.sh: no sutra binary at $bin (build it: cargo build --release -p sutra-cli)" >&2
  exit 2
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

check_install() { # $1: a project directory sutra-worker was installed into
  (cd "$1" && node --input-type=module -e '
    const sdk = await import("sutra-worker");
    for (const name of ["Client", "Worker", "TaskError", "ApiError"]) {
      if (typeof sdk[name] !== "function") throw new Error(`sutra-worker exports no ${name}`);
    }
    const { readFileSync } = await import("node:fs");
    const manifest = JSON.parse(readFileSync("node_modules/sutra-worker/package.json", "utf8"));
    readFileSync(new URL(manifest.types, "file://" + process.cwd() + "/node_modules/sutra-worker/"));
    new sdk.Worker({ workerId: "ci" }).task("t", () => null);
  ')
}

echo "== npm install $here (into an empty project)"
mkdir "$scratch/linked" "$scratch/packed"
(cd "$scratch/linked" && npm init -y >/dev/null && npm install --no-audit --no-fund "$here" >/dev/null)
check_install "$scratch/linked"
echo "== npm install --install-links $here (the packed files alone)"
(cd "$scratch/packed" && npm init -y >/dev/null && npm install --no-audit --no-fund --install-links "$here" >/dev/null)
check_install "$scratch/packed"
if [ -d "$scratch/packed/node_modules/sutra-worker/node_modules" ] || [ "$(ls "$scratch/packed/node_modules")" != "sutra-worker" ]; then
  echo "sdks/typescript/ci.sh: installing sutra-worker brought other packages; it must have no runtime dependencies" >&2
  exit 1
fi

echo "== type-checking src/index.d.ts (test/types.ts)"
(cd "$here" && npm ci --no-audit --no-fund >/dev/null && npx --no-install tsc -p tsconfig.json)

echo "== tests against $bin"
cd "$here"
SUTRA_BIN="$bin" node --test test/worker.test.js test/example.test.js
