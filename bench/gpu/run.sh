#!/usr/bin/env bash
# Runs on the GPU machine, from the repository's root, with what stage.sh
# made (bench/gpu/README.md):
#   bench/gpu/run.sh unpack STAGE_DIR   unpacks what STAGE_DIR holds (any of the
#                                       files; parts of the wheel may come in
#                                       separate runs) into /tmp/exmlx-gpu
#   bench/gpu/run.sh suite OUT_DIR      runs the ExUnit suite with
#                                       default_device: :gpu; log and summary
#                                       into OUT_DIR (EXMLX_SUITE_FILES, a
#                                       wildcard of test files: those only)
#   bench/gpu/run.sh bench OUT_DIR      the GPU rows: bench/gpu/bench.exs (ExMLX)
#                                       and bench/gpu/reference.py (Python mlx
#                                       on the same libmlx, PyTorch) in
#                                       alternating rounds; OUT_DIR/gpu.md
#   bench/gpu/run.sh models OUT_DIR     the Bumblebee model rows
#                                       (integration/bench/models.exs with
#                                       --device gpu, PyTorch on CUDA);
#                                       OUT_DIR/models.md
#   bench/gpu/run.sh llm OUT_DIR SHAPE...  language-model generation
#                                       (integration/bench/llm.exs --device
#                                       gpu) beside mlx-lm and PyTorch;
#                                       OUT_DIR/llm-SHAPE.md (LLM_ARGS: more
#                                       options, e.g. --fuse)
#   bench/gpu/run.sh trace OUT_DIR SHAPE...  the llm rows with every CUDA
#                                       process's GPU timeline recorded
#                                       (kernel_trace.c), summed up in
#                                       OUT_DIR/trace-SHAPE.txt
#   bench/gpu/run.sh nccl OUT_DIR [N]   NCCL across N GPUs: probe, references
#                                       (torch.distributed, Python mlx),
#                                       data-parallel training; OUT_DIR/nccl.txt
#   bench/gpu/run.sh elixir ARGS...     runs elixir with the app on the code
#                                       path and MLX's CUDA runtime (probes)
set -euo pipefail
cd "$(dirname "$0")/../.."
work=/tmp/exmlx-gpu
mkdir -p "$work"

# MLX's CUDA runtime laid out as `mix compile` provisions it on a CUDA
# machine (ExMLX.Build.gpu_runtime/0): the mlx-cuda-13 wheel unpacked, with
# NVIDIA's libraries in `nvidia/` beside it (here: the ones PyTorch's wheels
# installed), which libmlx finds by its own run-time path. The staged NIF's
# run-time path names that libmlx (stage.sh): no LD_LIBRARY_PATH.
cuda_env() {
  local nv
  nv=$(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia 2>/dev/null | head -1)
  [[ -e $work/mlx-cuda/nvidia ]] || ln -s "$nv" "$work/mlx-cuda/nvidia"
  # the staged Elixir (elixir.tar.xz) when there is one, else Debian's
  local elixir_bin=/usr/lib/elixir/bin
  [[ -x $work/elixir/bin/elixir ]] && elixir_bin=$work/elixir/bin
  export PATH=/usr/lib/erlang/bin:$elixir_bin:$PATH LANG=C.UTF-8
}

# The Python that has PyTorch (the machine's), else python3
python_with_torch() {
  local py
  py=$(ls /opt/*/.venv/bin/python3 2>/dev/null | head -1)
  echo "${py:-python3}"
}

# -pa for each staged application (ExMLX, and Nx's when staged)
code_paths() {
  for ebin in "$work"/lib/*/ebin; do printf -- '-pa\n%s\n' "$ebin"; done
  # (the protocols consolidated at staging, stage.sh: Elixir prepends each
  # -pa folder in turn, so the last one given is searched first)
  if [[ -d $work/lib/consolidated ]]; then printf -- '-pa\n%s\n' "$work/lib/consolidated"; fi
}

case "$1" in
  unpack)
    stage=$2
    for f in "$stage"/*; do cp "$f" "$work/"; done
    if [[ -f $work/erlang.tar.xz && ! -x /usr/lib/erlang/bin/erl ]]; then
      tar -C / -xJf "$work/erlang.tar.xz"
    fi
    if [[ -f $work/elixir.tar.xz && ! -d $work/elixir ]]; then
      mkdir -p "$work/elixir" && tar -C "$work/elixir" -xJf "$work/elixir.tar.xz"
    fi
    if [[ -f $work/app.tar.gz ]]; then
      rm -rf "$work/lib" && mkdir -p "$work/lib" && tar -C "$work/lib" -xzf "$work/app.tar.gz"
      rm -f "$work/app.tar.gz"
    fi
    # the integration project's applications, beside the app's (stage.sh)
    if [[ -f $work/integration.tar.gz ]]; then
      mkdir -p "$work/lib" && tar -C "$work/lib" -xzf "$work/integration.tar.gz"
      rm -f "$work/integration.tar.gz"
    fi
    # transformers for the GPU machine's PyTorch, installed beside it
    if [[ -f $work/transformers.tar && ! -d $work/pylib ]]; then
      tar -C "$work" -xf "$work/transformers.tar"
      "$(python_with_torch)" -m pip install --quiet --no-index --find-links "$work/wheels" \
        --target "$work/pylib" transformers
    fi
    if [[ -f $work/mlx-cuda.part-aa && -f $work/mlx-cuda.part-ab && ! -d $work/mlx-cuda ]]; then
      cat "$work"/mlx-cuda.part-a* > "$work/mlx-cuda.whl"
      python3 -m zipfile -e "$work/mlx-cuda.whl" "$work/mlx-cuda"
    fi
    # the kernel-trace injection library and CUPTI (stage.sh), for run.sh trace
    if [[ -f $work/kernel-trace.tar.gz ]]; then
      mkdir -p "$work/kernel-trace" && tar -C "$work/kernel-trace" -xzf "$work/kernel-trace.tar.gz"
    fi
    # mlx-lm (pure Python), for the language-model rows
    if [[ -f $work/mlx-lm.whl && ! -d $work/mlx-lm ]]; then
      python3 -m zipfile -e "$work/mlx-lm.whl" "$work/mlx-lm"
    fi
    # CUDA's crt/ headers into the NVIDIA folder the CUDA libmlx reads
    # (stage.sh: cuda-crt.whl), as ExMLX.Build provisions them
    if [[ -d $work/mlx-cuda && -f $work/cuda-crt.whl ]]; then
      cuda_env
      python3 -m zipfile -e "$work/cuda-crt.whl" "$work/mlx-cuda"
    fi
    # Python mlx's bindings, beside the CUDA libmlx they load (one package)
    if [[ -d $work/mlx-cuda && -f $work/mlx-python.whl ]] && ! ls "$work"/mlx-cuda/mlx/core.*.so >/dev/null 2>&1; then
      python3 -m zipfile -e "$work/mlx-python.whl" "$work/mlx-cuda"
    fi
    ls "$work"
    ;;
  suite)
    out=$2
    mkdir -p "$out"
    cuda_env
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" || true
    # one pass of bench/gpu/suite.exs into LOG, its summary on stdout
    # (integration tests among EXMLX_SUITE_FILES run their Python scripts
    # with the machine's PyTorch, the staged transformers, Python mlx and
    # mlx-lm: ExMLX.Integration.mlx_python_paths/0)
    suite_pass() {
      local log=$1 status=0
      INTEGRATION_PYTHON="$(python_with_torch)" PYTHONPATH="$work/pylib:$work/mlx-cuda:$work/mlx-lm" \
        elixir $(code_paths) bench/gpu/suite.exs > "$log" 2>&1 || status=$?
      grep -E "doctests|tests,|failure" "$log" | tail -3 || true
      echo "exit $status"
    }
    {
      suite_pass "$out/suite.log"
      # the tests tagged :one_op_per_graph, with one op in each of MLX's
      # CUDA graphs (bench/gpu/suite.exs: memory bounds of what ExMLX holds)
      echo "one op a graph (MLX_MAX_OPS_PER_BUFFER=1), the tests tagged :one_op_per_graph:"
      EXMLX_SUITE_PASS=one_op_per_graph MLX_MAX_OPS_PER_BUFFER=1 suite_pass "$out/suite-one-op.log"
    } > "$out/summary.txt"
    cat "$out/gpu.txt" "$out/summary.txt"
    ;;
  bench)
    cuda_env
    # (the runner bin/bench uses too, given this bundle's ways to run things)
    EXMLX_SCRIPT="elixir $(code_paths | tr '\n' ' ')" \
      EXMLX_NX=$(ls "$work"/lib/nx/ebin >/dev/null 2>&1 && echo 1 || echo 0) \
      MLX_PYTHONPATH="$work/mlx-cuda" TORCH_PYTHON="$(python_with_torch)" \
      bench/gpu/rows.sh "$2"
    ;;
  models)
    out=$2
    mkdir -p "$out"
    cuda_env
    # (no Mix here: the script names the integration project's folder and
    # the interpreter itself; the models are made there by bench_models.py)
    EXMLX_INTEGRATION_ROOT="$PWD/integration" INTEGRATION_PYTHON="$(python_with_torch)" \
      PYTHONPATH="$work/pylib" elixir $(code_paths) integration/bench/models.exs \
      --device gpu --out "$out/models.md"
    ;;
  llm)
    # Language-model generation (integration/bench/llm.exs --device gpu) for
    # each SHAPE (llama-1b, llama-8b, or a config.json), beside mlx-lm on the
    # staged CUDA libmlx and PyTorch; OUT_DIR/llm-SHAPE.md. The models are
    # made here (integration/data/llm/, bf16: 2.5 GB and 16 GB).
    out=$2
    shift 2
    mkdir -p "$out"
    cuda_env
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" || true
    for shape in "$@"; do
      EXMLX_INTEGRATION_ROOT="$PWD/integration" INTEGRATION_PYTHON="$(python_with_torch)" \
        PYTHONPATH="$work/pylib:$work/mlx-cuda:$work/mlx-lm" elixir $(code_paths) \
        integration/bench/llm.exs --device gpu --shape "$shape" ${LLM_ARGS:-} \
        --out "$out/llm-$(basename "$shape" .json).md" 2>&1 | tee "$out/llm-$(basename "$shape" .json).log"
    done
    # the kernel modules MLX built with NVRTC on this machine so far (one
    # .ptx file each in its disk cache, docs/gpu.md), by name
    ptx_dir=${MLX_PTX_CACHE_DIR:-${TMPDIR:-/tmp}/mlx/$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import mlx.core as mx; print(mx.__version__)' "$work/mlx-cuda" 2>/dev/null || echo 0.32.2)/ptx}
    if [[ -d $ptx_dir ]]; then
      find "$ptx_dir" -name '*.ptx' -printf '%T@ %s %P\n' | sort -n > "$out/ptx-modules.txt"
      echo "==> $(wc -l < "$out/ptx-modules.txt") kernel modules in $ptx_dir (OUT/ptx-modules.txt)"
    fi
    ;;
  ab)
    # Two NIFs on one machine: the staged one (a) and OTHER_NIF (b, a
    # staged app's libex_mlx.so: its run-time path set by stage.sh), the
    # `llm` rows of SHAPE without references, alternated for ROUNDS
    # rounds (default 2), each NIF with a kernel cache of its own
    # (MLX_PTX_CACHE_DIR), empty at its first round: that round's first
    # call is a fresh machine's. OUT_DIR/{a,b}N.md, the rows that differ
    # most in OUT_DIR/ab.txt.
    out=$2 other=$3 shape=$4 rounds=${5:-2}
    mkdir -p "$out"
    nif=$work/lib/ex_mlx/priv/native/libex_mlx.so
    cp "$nif" "$work/libex_mlx-a.so"
    cp "$other" "$work/libex_mlx-b.so"
    rm -rf "$work"/ptx-a "$work"/ptx-b
    for round in $(seq 1 "$rounds"); do
      for v in a b; do
        cp "$work/libex_mlx-$v.so" "$nif"
        MLX_PTX_CACHE_DIR="$work/ptx-$v" LLM_ARGS="${LLM_ARGS:-} --no-references" \
          "$0" llm "$work/ab-$v$round" "$shape" > "$work/ab-$v$round.log" 2>&1 || echo "$v$round: exit $?"
        cp "$work/ab-$v$round/llm-$(basename "$shape" .json).md" "$out/$v$round.md" || true
      done
    done
    cp "$work/libex_mlx-a.so" "$nif"
    for f in "$out"/[ab][0-9]*.md; do
      echo "== $(basename "$f" .md)"
      grep -E '^\| (decode, |prefill, (32|512) tokens \(|first generation|kernel modules|a decoding step|peak)' "$f" | cut -d'|' -f2,3
    done | tee "$out/ab.txt"
    ;;
  trace)
    # The llm rows of each SHAPE with every CUDA process's GPU timeline
    # recorded (bench/gpu/kernel_trace.c: ExMLX's, mlx-lm's and PyTorch's
    # processes), then summed up by bench/gpu/kernel_trace.py into
    # OUT_DIR/trace-SHAPE.txt. TRACE_DRIVER=1 records the host's driver
    # calls too (each then costs the host more time: the rows of such a run
    # are not the benchmark's).
    out=$2
    shift 2
    mkdir -p "$out"
    for shape in "$@"; do
      name=$(basename "$shape" .json)
      rm -f "$work"/trace-"$name".*.tsv
      env CUDA_INJECTION64_PATH="$work/kernel-trace/kernel_trace.so" \
        EXMLX_KERNEL_TRACE="$work/trace-$name" ${TRACE_DRIVER:+EXMLX_KERNEL_TRACE_DRIVER=1} "$0" llm "$out/traced" "$shape"
      for f in "$work"/trace-"$name".*.tsv; do
        python3 bench/gpu/kernel_trace.py "$f"
      done > "$out/trace-$name.txt" 2>&1
      cat "$out/trace-$name.txt"
    done
    ;;
  nccl)
    # NCCL across this machine's GPUs (N, default every GPU): ExMLX's probe
    # (checks, all_sum's bandwidth, a peer that dies), torch.distributed's
    # and Python mlx's all_sum bandwidth on the same GPUs, and data-parallel
    # training against one GPU; OUT_DIR/nccl.log, the figures in
    # OUT_DIR/nccl.txt
    out=$2
    n=${3:-$(nvidia-smi -L | wc -l)}
    mkdir -p "$out"
    cuda_env
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" || true
    nvidia-smi topo -m >> "$out/gpu.txt" 2>&1 || true
    {
      for round in 1 2; do
        echo "== round $round"
        elixir $(code_paths) bench/gpu/nccl_probe.exs "$n" 2>&1 || echo "probe exit $?"
        "$(python_with_torch)" bench/gpu/nccl_reference.py torch "$n" 2>&1 || echo "torch exit $?"
        PYTHONPATH="$work/mlx-cuda" python3 bench/gpu/nccl_reference.py mlx "$n" 2>&1 || echo "mlx exit $?"
      done
      echo "== training"
      elixir $(code_paths) bench/gpu/nccl_training.exs "$n" 2>&1 || echo "training exit $?"
    } > "$out/nccl.log"
    grep -E "^(ok|FAIL)|BW |^REF |peer gone|bad peer|recv=|step |exit|== " "$out/nccl.log" > "$out/nccl.txt" || true
    cat "$out/gpu.txt" "$out/nccl.txt"
    ;;
  elixir)
    shift
    cuda_env
    exec elixir $(code_paths) "$@"
    ;;
  *)
    echo "usage: $0 unpack STAGE_DIR | suite OUT_DIR | bench OUT_DIR | models OUT_DIR | llm OUT_DIR SHAPE... | trace OUT_DIR SHAPE... | nccl OUT_DIR [N] | elixir ARGS..." >&2
    exit 2
    ;;
esac
