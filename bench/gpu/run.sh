#!/usr/bin/env bash
# Runs on the GPU machine, from the repository's root, with what stage.sh
# made (bench/gpu/README.md):
#   bench/gpu/run.sh unpack STAGE_DIR   unpacks what STAGE_DIR holds (any of the
#                                       files; parts of the wheel may come in
#                                       separate runs) into /tmp/exmlx-gpu
#   bench/gpu/run.sh suite OUT_DIR      runs the ExUnit suite with
#                                       default_device: :gpu; log and summary
#                                       into OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
work=/tmp/exmlx-gpu
mkdir -p "$work"

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
    # MLX's CUDA runtime: its libmlx first (it replaces the CPU one the NIF
    # was linked to: same version, same API), then NVIDIA's libraries
    nv=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null ||
      ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia | head -1)
    export LD_LIBRARY_PATH="$work/mlx-cuda/mlx/lib:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib:${LD_LIBRARY_PATH:-}"
    export PATH=/usr/lib/erlang/bin:/usr/lib/elixir/bin:$PATH LANG=C.UTF-8
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" || true
    status=0
    elixir -pa "$work/lib/ex_mlx/ebin" bench/gpu/suite.exs > "$out/suite.log" 2>&1 || status=$?
    grep -E "doctests|tests,|failure" "$out/suite.log" | tail -3 > "$out/summary.txt" || true
    echo "exit $status" >> "$out/summary.txt"
    cat "$out/gpu.txt" "$out/summary.txt"
    ;;
  *)
    echo "usage: $0 unpack STAGE_DIR | suite OUT_DIR" >&2
    exit 2
    ;;
esac
