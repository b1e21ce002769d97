#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints the path of a Python that imports what the Python tests need
# (python/requirements-test.txt: pytest, numpy, prometheus_client,
# torch==2.13.0): $PYTHON (default python3) itself where it imports them;
# else the python of a virtual environment made from it, which sees its
# packages (--system-site-packages: Debian's python3-jsonschema) and has
# the requirements installed, built first when missing (a few minutes).
# make check runs it (python/python.mk), so that its Python tests run on a
# machine that has only the Debian packages of the test set.
#
# The environment is .ci/cached-venv.sh's python-test-venv, cached outside
# the clone (that script says where, and when it is built again).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
if "$python" -c 'import pytest, numpy, prometheus_client, torch' >/dev/null 2>&1; then
    echo "$python"
    exit 0
fi
root=$(cd "$here/../.." && pwd)
PYTHON=$python exec sh "$root/.ci/cached-venv.sh" python-test-venv "$root/python/requirements-test.txt" \
    --system-site-packages --imports 'pytest, numpy, prometheus_client, torch' \
    --why "$python lacks pytest, numpy, prometheus_client or torch (a few minutes)"
