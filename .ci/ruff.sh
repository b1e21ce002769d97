#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make lint's Python step: ruff, at the version python/requirements-lint.txt
# pins (.ci/lint-tool.sh finds it), over every Python file git tracks, with
# the rules of ruff.toml. Prints one line (the version and the number of
# files) when clean; ruff's findings and a non-zero status otherwise.
set -eu
cd "$(dirname "$0")/.."
ruff=$(sh .ci/lint-tool.sh ruff)
pinned=$("$ruff" --version | awk '{print $2}')

# The tracked files (a tarball without .git: every .py file but build/'s).
if [ -d .git ] || [ -f .git ]; then
    files=$(git ls-files -- '*.py')
else
    files=$(find . -path ./build -prune -o -name '*.py' -print)
fi
count=$(printf '%s\n' "$files" | grep -c .)
# shellcheck disable=SC2086 # the paths have no spaces (git ls-files would quote them)
"$ruff" check --quiet --no-cache --output-format concise $files >&2
echo "python: ruff $pinned over $count files (ruff.toml), clean"
