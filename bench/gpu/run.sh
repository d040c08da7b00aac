#!/usr/bin/env bash
# Runs on the GPU machine, from the repository's root, with what stage.sh
# made (bench/gpu/README.md):
#   bench/gpu/run.sh unpack STAGE_DIR   unpacks what STAGE_DIR holds (any of the
#                                       files; parts of the wheel may come in
#                                       separate runs) into /tmp/exmlx-gpu
#   bench/gpu/run.sh suite OUT_DIR      runs the ExUnit suite with
#                                       default_device: :gpu; log and summary
#                                       into OUT_DIR
#   bench/gpu/run.sh elixir ARGS...     runs elixir with the app on the code
#                                       path and MLX's CUDA runtime (probes)
set -euo pipefail
cd "$(dirname "$0")/../.."
work=/tmp/exmlx-gpu
mkdir -p "$work"

# MLX's CUDA runtime: its libmlx first (it replaces the CPU one the NIF was
# linked to: same version, same API), then NVIDIA's libraries
cuda_env() {
  local nv
  nv=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia 2>/dev/null | head -1)
  export LD_LIBRARY_PATH="$work/mlx-cuda/mlx/lib:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib:${LD_LIBRARY_PATH:-}"
  export PATH=/usr/lib/erlang/bin:/usr/lib/elixir/bin:$PATH LANG=C.UTF-8
}

case "$1" in
  unpack)
    stage=$2
    for f in "$stage"/*; do cp "$f" "$work/"; done
    if [[ -f $work/erlang.tar.xz && ! -x /usr/lib/erlang/bin/erl ]]; then
      tar -C / -xJf "$work/erlang.tar.xz"
    fi
    if [[ -f $work/app.tar.gz ]]; then
      rm -rf "$work/lib" && mkdir -p "$work/lib" && tar -C "$work/lib" -xzf "$work/app.tar.gz"
    fi
    if [[ -f $work/mlx-cuda.part-aa && -f $work/mlx-cuda.part-ab && ! -d $work/mlx-cuda ]]; then
      cat "$work"/mlx-cuda.part-a* > "$work/mlx-cuda.whl"
      python3 -m zipfile -e "$work/mlx-cuda.whl" "$work/mlx-cuda"
    fi
    ls "$work"
    ;;
  suite)
    out=$2
    mkdir -p "$out"
    cuda_env
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" || true
    status=0
    elixir -pa "$work/lib/ex_mlx/ebin" bench/gpu/suite.exs > "$out/suite.log" 2>&1 || status=$?
    grep -E "doctests|tests,|failure" "$out/suite.log" | tail -3 > "$out/summary.txt" || true
    echo "exit $status" >> "$out/summary.txt"
    cat "$out/gpu.txt" "$out/summary.txt"
    ;;
  elixir)
    shift
    cuda_env
    exec elixir -pa "$work/lib/ex_mlx/ebin" "$@"
    ;;
  *)
    echo "usage: $0 unpack STAGE_DIR | suite OUT_DIR | elixir ARGS..." >&2
    exit 2
    ;;
esac
