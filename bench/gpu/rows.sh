#!/usr/bin/env bash
# The GPU rows (bench/gpu/README.md), wherever ExMLX runs on a GPU: ExMLX
# (bench/gpu/bench.exs), Python mlx on the same MLX version and PyTorch
# (bench/gpu/reference.py) in alternating rounds, TF32 on and off, then
# bench/gpu/report.py; with Nx, the defn programs (bench/gpu/defn.exs beside
# bench/defn_reference.py --gpu). Writes OUT_DIR/gpu.md and prints it.
#
#   bench/gpu/rows.sh OUT_DIR
#
# How to run things comes from the environment:
#   EXMLX_SCRIPT   the command that runs an Elixir script with ExMLX loaded
#                  (`mix run` in the project; `elixir -pa ...` from a bundle)
#   EXMLX_NX       1 when Nx is loaded too (the defn rows need it)
#   MLX_PYTHONPATH where Python mlx for the GPU is (PYTHONPATH of its runs)
#   TORCH_PYTHON   the Python that has PyTorch for the GPU (default python3)
#   TORCH_PYTHONPATH  PYTHONPATH of its runs, if PyTorch is installed apart
#   BENCH_ROUNDS   rounds of the three (default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1
mkdir -p "$out"
: "${EXMLX_SCRIPT:?the command that runs an Elixir script with ExMLX}"
py=${TORCH_PYTHON:-python3}
rounds=${BENCH_ROUNDS:-2}
files=()
# The three run one after another on one GPU, whose clocks follow its power
# and heat: odd rounds run ExMLX first, even rounds last, so no side always
# gets the GPU as the one before left it.
run_exmlx() {
  MLX_ENABLE_TF32=$tf32 $EXMLX_SCRIPT bench/gpu/bench.exs "$out/exmlx.$r$mode.tsv" $mode
}
run_mlx() {
  MLX_ENABLE_TF32=$tf32 PYTHONPATH="${MLX_PYTHONPATH:-}" \
    "$py" bench/gpu/reference.py mlx "$out/mlx.$r$mode.tsv" $mode
}
run_torch() {
  PYTHONPATH="${TORCH_PYTHONPATH:-}" "$py" bench/gpu/reference.py torch "$out/torch.$r$mode.tsv" $mode
}
for r in $(seq "$rounds"); do
  for mode in "" tf32-off; do
    tf32=$([[ $mode == tf32-off ]] && echo 0 || echo 1)
    if (( r % 2 == 1 )); then
      echo "==> round $r ${mode:-(TF32 on)}: ExMLX, Python mlx, PyTorch"
      run_exmlx && run_mlx && run_torch
    else
      echo "==> round $r ${mode:-(TF32 on)}: PyTorch, Python mlx, ExMLX"
      run_torch && run_mlx && run_exmlx
    fi
    files+=("$out/exmlx.$r$mode.tsv" "$out/mlx.$r$mode.tsv" "$out/torch.$r$mode.tsv")
  done
done
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
PYTHONPATH="${TORCH_PYTHONPATH:-}" "$py" bench/gpu/report.py "${gpu:-GPU}" "$rounds" "${files[@]}" > "$out/gpu.md"
if [[ ${EXMLX_NX:-0} == 1 ]]; then
  echo "==> defn programs: ExMLX.Compiler, the Evaluator, Python mlx"
  PYTHONPATH="${MLX_PYTHONPATH:-}" "$py" bench/defn_reference.py --gpu > "$out/defn_py.json"
  $EXMLX_SCRIPT bench/gpu/defn.exs "$out/defn.md" "$out/defn_py.json" > /dev/null
  printf '\n' >> "$out/gpu.md" && cat "$out/defn.md" >> "$out/gpu.md"
fi
cat "$out/gpu.md"
