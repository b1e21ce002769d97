#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs fldispatch's GPU benchmarks and checks on a machine with an NVIDIA GPU,
# from the kit bench/gpu/pack.sh made (.gpu-kit/ at the project root).
#
#   bash .gpu-kit/on_device.sh [STEP...]
#
# Steps, in the order given (default: sweep verify check peers):
#   sweep    gpu_sweep: every candidate launch shape under CUDA graphs
#            (SWEEP_ARGS: more options, e.g. --tokens 1,8,32,128 --dtypes bf16,f16)
#   verify   fldispatch verify --device cuda (every op, dtype and family
#            against the reference; VERIFY_ARGS: ops to verify, e.g.
#            "rms_norm silu_and_mul")
#   check    gpu_check.py (where the kit has it): > 65535 rows, > 2^31
#            elements, misaligned views, rotary on qkv views, graph capture
#   numerics vllm_numerics.py --device cuda: vLLM's kernel tests' shapes
#            against PyTorch's GPU kernels, and every 16-bit input of each
#            activation, whose bits should agree (CUDA's expf, erff, tanhf
#            and division on both sides)
#   install  fldispatch's wheel and the peers' into /tmp/fld-site, then the
#            native torch kernels compiled for this machine's torch into it
#            (torch_native.sh; without a C++ compiler or Python.h the
#            Python-level kernels serve torch.ops.fldispatch.*, and
#            gpu_peers.py's fld_torch rows say so; INSTALL_NATIVE=0 skips
#            the native kernels)
#   vllm     vLLM from the chunks staged under /tmp/vllm-stage (or the parts
#            of bench/gpu/split.sh under /tmp/vllm-parts, joined there first)
#            into /tmp/vllm-site (the chunks of pack-vllm.sh)
#   peers    gpu_peers.py (budget PEERS_BUDGET_S, default 200 s; PEERS_ARGS:
#            more options, e.g. --dtypes bf16,f16); vLLM's _C rows only after
#            the vllm step (without it they are skipped, and said so)
#   base     gpu_peers.py on the base build's library alone, in its own
#            process (two copies of the library in one process bind each
#            other's symbols): its rows are fld_base, for before/after
#            (BASE_ARGS: more options, e.g. --ops rms_norm --dtypes bf16);
#            then the second base's, where the kit has one, as fld_base2
#            (each BASE_BUDGET_S)
#   ncu      Nsight Compute on one call of each decode and 4096-row case,
#            this tree's kernels, then the base's (each its own process;
#            NCU_BUILDS="lib" profiles this tree's alone); NCU_IMPLS adds
#            peers beside this tree's (e.g. fldispatch,liger,compile: each
#            peer's kernels of the same call), NCU_SECTIONS more sections
#            (e.g. "--section WarpStateStats --section InstructionStats
#            --section SchedulerStats": where a decode call's cycles go;
#            --metrics too)
#   sass     the peers' kernels as Triton and Inductor compiled them in the
#            steps before (their caches' .cubin files, each with its
#            metadata), into peer-cubins/ of the results, so that
#            bench/gpu_sass.py reads the instructions a thread of Liger's or
#            Inductor's kernel runs beside this tree's, off the machine
#   engine   vllm_cuda.py, vLLM's CUDA engine with and without fldispatch
#            (budget ENGINE_BUDGET_S, default 300 s; ENGINE_ARGS: more
#            options, e.g. --configs 5,6,8,9)
#   tune     python -m fldispatch tune --device cuda --quick (device time
#            under CUDA-graph replay; the manifest into the results)
#   ctune    the tool's own fldispatch tune --device cuda --quick --json:
#            the same timing through fld-cuda.so's graph hooks, no PyTorch
#            (figures and manifest into the results; CTUNE_ARGS: ops and
#            options, e.g. "rms_norm --dtype bf16")
#   irtests  python/tests/test_vllm_ir.py (vLLM's IR contract, also on CUDA
#            tensors), test_tune_gpu.py and engine/test_serve.py's docs
#            block (vLLM's OpenAI server on one GPU: the engine core runs
#            the model and must leave its counters at Ctrl-C; its test of
#            several API servers checks nothing of CUDA's and stays on CPU),
#            from this checkout, against the installed package and vLLM
# Results are written to /tmp/fld-gpu-results (kept while the machine is)
# and packed, at the end, into $OUT/results.tgz beside $OUT/log.txt, which
# names each step's exit status and time. A step that fails does not stop
# the next.
set -u
kit=$(cd "$(dirname "$0")" && pwd)
out=/tmp/fld-gpu-results
mkdir -p "$out" "${OUT:=/tmp/fld-gpu-out}"
export LD_LIBRARY_PATH="$kit/syslib:$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VLLM_FL_PLATFORM=nvidia PYTHONUNBUFFERED=1
site=/tmp/fld-site vsite=/tmp/vllm-site
log=$out/log.txt
step() { # name outfile command...: at most STEP_LIMIT_S (default 300) seconds
  local name=$1 file=$2 t0=$SECONDS; shift 2
  timeout "${STEP_LIMIT_S:-300}" "$@" >"$out/$file" 2>&1
  echo "== $name: exit $? in $((SECONDS - t0)) s -> $file" | tee -a "$log"
}
pypath() { local p=$site; [ -d "$vsite/vllm" ] && p=$p:$vsite; echo "$p"; }
install_vllm() {
  # the parts of bench/gpu/split.sh, once all have arrived, into the chunks' folder
  if ! ls /tmp/vllm-stage/vslim.* >/dev/null 2>&1 && ls /tmp/vllm-parts/v.* >/dev/null 2>&1; then
    mkdir -p /tmp/vllm-stage && cat /tmp/vllm-parts/v.* | tar x -C /tmp/vllm-stage || return 1
  fi
  [ -f "$vsite/vllm/__init__.py" ] || { mkdir -p "$vsite" && cat /tmp/vllm-stage/vslim.* | tar xz -C "$vsite"; } || return 1
  [ -f /tmp/vllm-stage/fa3.so.gz ] && gunzip -c /tmp/vllm-stage/fa3.so.gz > "$vsite/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$vsite" /tmp/vllm-stage/deps/*.whl || return 1
  PYTHONPATH=$vsite python3 -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
}
collect_cubins() {
  # the Triton and Inductor caches' kernels, each with its metadata, into peer-cubins/
  find "${TRITON_CACHE_DIR:-$HOME/.triton/cache}" /tmp/torchinductor_* -name '*.cubin' 2>/dev/null |
    while read -r f; do
      d="$out/peer-cubins/$(basename "$(dirname "$f")")"
      mkdir -p "$d" && cp "$f" "$d/" && { cp "${f%.cubin}.json" "$d/" 2>/dev/null || true; }
    done
  echo "$(find "$out/peer-cubins" -name '*.cubin' 2>/dev/null | wc -l) cubins in peer-cubins/"
}
{ nvidia-smi; echo; "$kit/bin/fldispatch" list; } >"$out/nvidia-smi.txt" 2>&1
for s in ${*:-sweep verify check peers}; do
  case $s in
  sweep) step sweep sweep.txt "$kit/gpu_sweep" --json "$out/sweep.jsonl" ${SWEEP_ARGS:-} ;;
  verify) step verify verify.txt "$kit/bin/fldispatch" verify --device cuda ${VERIFY_ARGS:-} ;;
  check) [ -f "$kit/gpu_check.py" ] && step check gpu_check.txt env FLD_LIB="$kit/lib/libfldispatch.so" \
           python3 "$kit/gpu_check.py" --json "$out/gpu_check.json" ;;
  numerics) step numerics numerics.txt python3 "$kit/vllm_numerics.py" --device cuda \
              --lib "$kit/lib/libfldispatch.so" ;;
  install) step install install.txt python3 -m pip install -q --no-index --no-deps --no-compile \
             --no-cache-dir --upgrade --target "$site" "$kit"/wheels/*.whl
           [ "${INSTALL_NATIVE:-1}" = 0 ] ||
             step "install native" install_native.txt bash "$kit/torch_native.sh" "$site" "$kit/native" ;;
  vllm) export -f install_vllm; export vsite; step vllm vllm_install.txt bash -c install_vllm ;;
  peers) step peers peers.txt env PYTHONPATH="$(pypath)" FLD_LIB="$kit/lib/libfldispatch.so" \
           python3 "$kit/gpu_peers.py" --budget-s "${PEERS_BUDGET_S:-200}" --out "$out" ${PEERS_ARGS:-} ;;
  base) for b in base base2; do
          [ -d "$kit/$b" ] || continue
          step "$b" "$b.txt" env LD_LIBRARY_PATH="$kit/syslib:$kit/$b/lib" \
            VLLM_FL_PLUGIN_DIR="$kit/$b/lib/fldispatch/plugins" \
            FLD_LIB="$kit/$b/lib/libfldispatch.so" python3 "$kit/gpu_peers.py" --label "fld_$b" \
            --impls floor,fldispatch --budget-s "${BASE_BUDGET_S:-60}" --out "$out" ${BASE_ARGS:-}
        done ;;
  ncu) impls=${NCU_IMPLS:-fldispatch}
       for build in ${NCU_BUILDS:-lib base/lib}; do
         step "ncu $build" "ncu-${build%%/*}.txt" env LD_LIBRARY_PATH="$kit/syslib:$kit/$build" \
           VLLM_FL_PLUGIN_DIR="$kit/$build/fldispatch/plugins" PYTHONPATH="$(pypath)" \
           FLD_LIB="$kit/$build/libfldispatch.so" ncu --profile-from-start off \
           --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
           ${NCU_SECTIONS:-} \
           python3 "$kit/gpu_peers.py" --ncu --impls "$impls" --label "${build%%/*}" --out /tmp/fld-ncu
         impls=fldispatch # the peers once, beside this tree's kernels
       done ;;
  sass) export -f collect_cubins; export out; step sass sass.txt bash -c collect_cubins ;;
  engine) step engine engine.txt env PYTHONPATH="$(pypath)" python3 "$kit/vllm_cuda.py" \
            --budget-s "${ENGINE_BUDGET_S:-300}" --out "$out/engine" ${ENGINE_ARGS:-} ;;
  tune) step tune tune.txt env PYTHONPATH="$(pypath)" python3 -m fldispatch tune --device cuda \
          --quick --out "$out/manifest-cuda.yaml" ;;
  ctune) step ctune ctune.txt "$kit/bin/fldispatch" tune --device cuda --quick --quiet --json ${CTUNE_ARGS:-} \
          --out "$out/manifest-cuda-tool.yaml" ;;
  irtests) step irtests irtests.txt env PYTHONPATH="$(pypath)" python3 -m pytest -q -p no:cacheprovider \
             -rs "$PWD/python/tests/test_vllm_ir.py" "$PWD/python/tests/test_tune_gpu.py" \
             "$PWD/python/tests/engine/test_serve.py::test_the_server_block_runs_as_printed" ;;
  *) echo "== unknown step $s" | tee -a "$log" ;;
  esac
done
cp "$log" "$OUT/log.txt"
tar czf "$OUT/results.tgz" -C "$out" .
