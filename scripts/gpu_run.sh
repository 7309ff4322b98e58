#!/usr/bin/env bash
# One prepared GPU run (bench/gpu_run.py): set-up, export, profile, correctness against the CPU,
# speed against CTranslate2 and PyTorch, and the server under load; every number in
# OUT/results.json, a summary in OUT/results.md, the whole output in OUT/gpu_run.log (three files,
# within what a GPU call brings back). About 8 minutes on the GPU host, set-up included.
#
#   bash scripts/gpu_run.sh                           # CUDA; OUT is $OUT, else runs/gpu-results
#   bash scripts/gpu_run.sh --device cpu --out /tmp/r # small sizes on the CPU (~2 minutes): the same code
#   bash scripts/gpu_run.sh --dry-run                 # the plan only
#   bash scripts/gpu_run.sh --checkpoint C --package P --verses 100 --budget-s 300 ...   (python -m bench.gpu_run --help)
#
# Set-up on CUDA: when onnxruntime has no CUDAExecutionProvider and an offline wheel bundle was
# copied in as .gpu/cNN chunks (each with its take.sh; made where a package index is reachable), they run
# (the last one unpacks onnxruntime-gpu, grpcio and the Bible DB); the module then calls
# onnxruntime.preload_dlls() and prints the providers. PYTHON overrides the interpreter
# (default: .venv/bin/python when there is one, else python3).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
device=cuda out=${OUT:-runs/gpu-results} dry=0 pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; pass+=("$1" "$2"); shift 2 ;;
    --device=*) device=${1#*=}; pass+=("$1"); shift ;;
    --out) out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --dry-run) dry=1; pass+=("$1"); shift ;;
    *) pass+=("$1"); shift ;;
  esac
done
export PYTHONPATH="$PWD:$PWD/protos${PYTHONPATH:+:$PYTHONPATH}"
chunks=$(ls -d .gpu/c*/ 2>/dev/null | sort)
if [ "$dry" = 1 ]; then
  echo "plan (device $device, results in $out):"
  if [ "$device" = cuda ]; then
    echo "set-up: if onnxruntime lacks CUDAExecutionProvider: bash .gpu/cNN/take.sh for each carried chunk" \
         "(carried now: ${chunks:-none})"
  fi
  exec "$PYTHON" -m bench.gpu_run --out "$out" "${pass[@]}"
fi
mkdir -p "$out"
{
  echo "gpu_run.sh: device $device, python $("$PYTHON" -c 'import platform; print(platform.python_version())')"
  if [ "$device" = cuda ]; then
    has_cuda() { "$PYTHON" -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())" 2>/dev/null; }
    if ! has_cuda; then
      if [ -n "$chunks" ]; then
        for d in $chunks; do
          echo "set-up: bash ${d}take.sh"
          bash "${d}take.sh" || echo "set-up: ${d}take.sh failed (are earlier chunks missing? copy them in first)"
        done
      else
        echo "set-up: onnxruntime has no CUDAExecutionProvider and no .gpu/ chunks were carried" \
             "(copy in an offline onnxruntime-gpu wheel bundle as .gpu/cNN); onnxruntime on CUDA will fail"
      fi
    fi
    has_cuda && echo "set-up: onnxruntime has the CUDA provider"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
  fi
  "$PYTHON" -m bench.gpu_run --out "$out" "${pass[@]}"
  status=$?
  echo
  cat "$out/results.md" 2>/dev/null
  echo "gpu_run.sh: exit $status; results in $out (results.json, results.md, gpu_run.log)"
  exit $status
} 2>&1 | tee "$out/gpu_run.log"
exit "${PIPESTATUS[0]}"
