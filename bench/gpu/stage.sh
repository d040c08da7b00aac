#!/usr/bin/env bash
# Builds, on this (CPU) machine, what a bare Linux GPU machine without network
# needs to run ExMLX's ExUnit suite on :gpu (bench/gpu/README.md), into
# _build/gpu-stage/ (ignored by git):
#   erlang.tar.xz     Debian's Erlang/OTP and Elixir, as installed here
#   app.tar.gz        the test build of the app: ex_mlx/{ebin,priv}
#   mlx-cuda.part-a*  the mlx-cuda-13 wheel (MLX's CUDA libmlx), split in two
#                     halves: one run of the GPU machine carries 64 MiB at most
set -euo pipefail
cd "$(dirname "$0")/../.."

out=_build/gpu-stage
mkdir -p "$out"

echo "==> compiling the test build"
MIX_ENV=test mix compile >/dev/null

if [[ ! -f $out/erlang.tar.xz ]]; then
  echo "==> packing Erlang/OTP and Elixir (/usr/lib/erlang, /usr/lib/elixir)"
  tar -C / -cJf "$out/erlang.tar.xz" usr/lib/erlang usr/lib/elixir
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

echo "==> packing the app"
tar -C _build/test/lib -czf "$out/app.tar.gz" ex_mlx/ebin ex_mlx/priv
ls -l "$out"
