#!/usr/bin/env bash
# Builds, on this (CPU) machine, what a bare Linux GPU machine without network
# needs to run ExMLX's ExUnit suite on :gpu (bench/gpu/README.md), into
# _build/gpu-stage/ (ignored by git):
#   erlang.tar.xz     Debian's Erlang/OTP and Elixir, as installed here
#   app.tar.gz        the test build of the app: ex_mlx/{ebin,priv}, and
#                     consolidated/: every protocol consolidated over the
#                     staged applications (bench/gpu/consolidate.exs)
#   mlx-cuda.part-a*  the mlx-cuda-13 wheel (MLX's CUDA libmlx), split in two
#                     halves: one run of the GPU machine carries 64 MiB at most
#   cuda-crt.whl      CUDA's crt/ headers (nvidia-cuda-crt), which MLX's
#                     NVRTC-compiled quantized-matmul kernels include
#   mlx-python.whl    Python mlx's bindings (the `mlx` wheel, 0.7 MB) for the
#                     reference rows of bench/gpu/run.sh bench
#   kernel-trace.tar.gz  bench/gpu/kernel_trace.c built, and NVIDIA's CUPTI
#                     library it records with (run.sh trace)
# With the integration project built with Bumblebee (BUMBLEBEE_PATH set and
# integration/_build/test compiled), for bench/gpu/run.sh models:
#   integration.tar.gz  its applications the app does not hold (Bumblebee,
#                       Axon, tokenizers and the rest, ex_mlx_integration)
#   transformers.tar    the `transformers` wheel and those it needs, for
#                       Python 3.12 (PyTorch's side of the models' rows)
#   mlx-lm.whl          mlx-lm, for bench/gpu/run.sh llm
set -euo pipefail
cd "$(dirname "$0")/../.."

out=_build/gpu-stage
mkdir -p "$out"

echo "==> compiling the test build"
MIX_ENV=test mix compile >/dev/null

if [[ ! -f $out/erlang.tar.xz ]]; then
  echo "==> packing Erlang/OTP and Elixir (/usr/lib/erlang, /usr/lib/elixir)"
  # (without Erlang's sources, documentation and the applications no test
  # starts: with Debian's erlang-src installed the whole tree packed to 31 MB,
  # and with mlx-cuda.part-aa passed a run's 64 MiB; this set is 21 MB and
  # runs the GPU suite; XML, Erlang's unit tests and C nodes left out keep it
  # there with Debian's erlang-dev and erlang-xmerl installed)
  unused=(wx megaco diameter snmp observer debugger et reltool common_test dialyzer
    jinterface odbc mnesia ssh eldap edoc erl_docgen tftp ftp xmerl eunit erl_interface)
  excludes=(--exclude='usr/lib/erlang/lib/*/src' --exclude='usr/lib/erlang/lib/*/doc'
    --exclude='usr/lib/erlang/man')
  for app in "${unused[@]}"; do excludes+=(--exclude="usr/lib/erlang/lib/$app-*"); done
  tar -C / "${excludes[@]}" -cJf "$out/erlang.tar.xz" usr/lib/erlang usr/lib/elixir
fi

if ! ls "$out"/mlx-cuda.part-a* >/dev/null 2>&1; then
  # (MLX's version: ExMLX.Build.mlx_version/0, mix/ex_mlx_build.ex)
  echo "==> downloading mlx-cuda-13==0.32.2"
  rm -rf "$out/wheel"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_35_x86_64 --python-version 3.12 \
    mlx-cuda-13==0.32.2 -d "$out/wheel"
  split -n 2 "$out"/wheel/*.whl "$out/mlx-cuda.part-"
  rm -rf "$out/wheel"
fi

# CUDA's crt/ headers, which MLX's NVRTC-compiled quantized-matmul kernels
# include (ExMLX.Build provisions them beside mlx-cuda-13 the same way)
if [[ ! -f $out/cuda-crt.whl ]]; then
  echo "==> downloading nvidia-cuda-crt 13 (CUDA's crt/ headers)"
  rm -rf "$out/wheel"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux2014_x86_64 --python-version 3.12 "nvidia-cuda-crt==13.*" -d "$out/wheel"
  mv "$out"/wheel/nvidia_cuda_crt-*.whl "$out/cuda-crt.whl"
  rm -rf "$out/wheel"
fi

if [[ ! -f $out/mlx-python.whl ]]; then
  echo "==> downloading mlx==0.32.2 (Python bindings, cp312)"
  rm -rf "$out/wheel"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_35_x86_64 --python-version 3.12 mlx==0.32.2 -d "$out/wheel"
  mv "$out"/wheel/mlx-*.whl "$out/mlx-python.whl"
  rm -rf "$out/wheel"
fi

# bench/gpu/kernel_trace.c (the GPU's timeline of a process, run.sh trace)
# built against NVIDIA's CUPTI, with CUPTI's library beside it. (CUPTI
# 13.0: a CUPTI newer than the driver's CUDA refuses to start; the GPU
# machine's driver is CUDA 13.0's.)
if [[ ! -f $out/kernel-trace.tar.gz ]]; then
  echo "==> building bench/gpu/kernel_trace.c against nvidia-cuda-cupti 13.0"
  rm -rf "$out/cupti" && mkdir -p "$out/cupti/wheels" "$out/cupti/x/lib"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96 -d "$out/cupti/wheels"
  for w in "$out"/cupti/wheels/*.whl "$out/cuda-crt.whl"; do
    python3 -m zipfile -e "$w" "$out/cupti/x"
  done
  cu=$out/cupti/x/nvidia/cu13
  cp "$cu/lib/libcupti.so.13" "$out/cupti/x/lib/"
  gcc -O2 -Wall -Wextra -Werror -shared -fPIC -I "$cu/include" bench/gpu/kernel_trace.c \
    -o "$out/cupti/x/lib/kernel_trace.so" -L "$cu/lib" -l:libcupti.so.13 -Wl,-rpath,'$ORIGIN'
  tar -C "$out/cupti/x/lib" -czf "$out/kernel-trace.tar.gz" kernel_trace.so libcupti.so.13
  rm -rf "$out/cupti"
fi

# The test build's applications: ExMLX and, when the build has them (NX_PATH),
# Nx and its dependencies
build=$(MIX_ENV=test mix run --no-compile --no-start -e 'IO.write(Mix.Project.build_path())')
apps=$(cd "$build/lib" && ls -d */ebin */priv 2>/dev/null)
echo "==> packing the app: $(echo "$apps" | grep ebin | tr '\n' ' ')"
rm -rf "$out/app" && mkdir -p "$out/app"
(cd "$build/lib" && tar -chf - $apps) | tar -C "$out/app" -xf -
# The NIF's run-time path names the CUDA libmlx where run.sh unpacks it, as
# `mix compile` does on a CUDA machine (ExMLX.Build.gpu_runtime/0): it then
# loads without LD_LIBRARY_PATH.
patchelf --set-rpath /tmp/exmlx-gpu/mlx-cuda/mlx/lib "$out/app/ex_mlx/priv/native/libex_mlx.so"
# The integration project's applications the app does not hold, when it is
# built with Bumblebee (BUMBLEBEE_PATH set and integration/_build/test
# compiled; INTEGRATION_LIB names another build of it: a folder of its
# applications), staged for run.sh models and llm (below)
integration_lib=${INTEGRATION_LIB:-integration/_build/test/lib}
integration_apps=()
if [[ -n ${BUMBLEBEE_PATH:-} && -d $integration_lib/bumblebee/ebin ]]; then
  for dir in "$integration_lib"/*/; do
    app=$(basename "$dir")
    [[ -d $build/lib/$app ]] || integration_apps+=("$app")
  done
fi
# The protocols consolidated over the staged applications, as Mix
# consolidates them for `mix test` and `mix run`; run.sh puts
# `consolidated/` first in the code path
protocol_paths=()
for ebin in "$build"/lib/*/ebin; do protocol_paths+=(-pa "$ebin"); done
for app in "${integration_apps[@]}"; do
  [[ -d $integration_lib/$app/ebin ]] && protocol_paths+=(-pa "$integration_lib/$app/ebin")
done
elixir "${protocol_paths[@]}" bench/gpu/consolidate.exs "$out/app/consolidated"
tar -C "$out/app" -czf "$out/app.tar.gz" .
rm -rf "$out/app"

# Elixir itself when it is not Debian's (Nx 0.13 needs Elixir >= 1.17: a
# build from source, design notes permitting): its bin/ and ebin folders
elixir_home=$(dirname "$(dirname "$(readlink -f "$(command -v elixir)")")")
if [[ $elixir_home != /usr/lib/elixir && $elixir_home != /usr ]]; then
  echo "==> packing Elixir $(elixir --short-version) from $elixir_home"
  tar -C "$elixir_home" -cJf "$out/elixir.tar.xz" bin $(cd "$elixir_home" && ls -d lib/*/ebin)
else
  rm -f "$out/elixir.tar.xz"
fi
# The Bumblebee model rows (run.sh models): the integration project's
# applications beside the app's, and transformers for the GPU machine's
# PyTorch (which has torch and nothing of Hugging Face's)
if ((${#integration_apps[@]})); then
  extra=$(cd "$integration_lib" && for app in "${integration_apps[@]}"; do
    for dir in ebin priv; do [[ -d $app/$dir ]] && echo "$app/$dir"; done
  done; true)
  echo "==> packing the integration applications: $(echo "$extra" | grep ebin | tr '\n' ' ')"
  (cd "$integration_lib" && tar -chzf - $extra) > "$out/integration.tar.gz"
  if [[ ! -f $out/transformers.tar ]]; then
    # (the version integration/bin/setup installs)
    version=$(grep -o 'transformers==[0-9.]*' integration/bin/setup)
    echo "==> downloading $version and what it needs (Python 3.12 wheels)"
    rm -rf "$out/wheels" && mkdir -p "$out/wheels"
    python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform any "$version" -d "$out/wheels"
    tar -C "$out" -cf "$out/transformers.tar" wheels
    rm -rf "$out/wheels"
  fi
  if [[ ! -f $out/mlx-lm.whl ]]; then
    # mlx-lm for the language-model rows (run.sh llm), on the staged mlx
    echo "==> downloading mlx-lm==0.32.2"
    rm -rf "$out/wheel"
    python3 -m pip download --quiet --no-deps --only-binary=:all: mlx-lm==0.32.2 -d "$out/wheel"
    mv "$out"/wheel/mlx_lm-*.whl "$out/mlx-lm.whl"
    rm -rf "$out/wheel"
  fi
else
  rm -f "$out/integration.tar.gz"
fi
ls -l "$out"
