# bin/bench's GPU rows, on a machine where ExMLX runs on a GPU: provisions
# Python mlx on ExMLX's CUDA libmlx and PyTorch (ExMLX.Build.bench_python_gpu
# and bench_torch, once), runs bench/gpu/rows.sh with `mix run` as the way
# to run ExMLX's scripts, and writes bench/results/gpu.md. Elsewhere it says
# why it skips. (bench/gpu/run.sh runs the same rows from a staged bundle.)
#
#   mix run bench/gpu/local.exs [--quick]
quick = "--quick" in System.argv()

skip = fn reason -> IO.puts("==> GPU rows skipped: #{reason}") end

cond do
  not ExMLX.device_available?(:gpu) ->
    skip.("no GPU in this MLX build")

  true ->
    with {:ok, mlx_path} <- ExMLX.Build.bench_python_gpu(),
         {:ok, torch_path} <- ExMLX.Build.bench_torch() do
      out = Path.join(Path.dirname(Mix.Project.build_path()), "bench-gpu")

      env = [
        {"EXMLX_SCRIPT", "mix run"},
        {"EXMLX_NX", if(Code.ensure_loaded?(Nx), do: "1", else: "0")},
        {"MLX_PYTHONPATH", mlx_path},
        {"TORCH_PYTHONPATH", torch_path},
        {"BENCH_ROUNDS", if(quick, do: "1", else: "2")}
      ]

      {_, status} =
        System.cmd("bench/gpu/rows.sh", [out],
          env: env,
          into: IO.stream(),
          stderr_to_stdout: true
        )

      if status == 0 do
        unless quick, do: File.cp!(Path.join(out, "gpu.md"), "bench/results/gpu.md")
        IO.puts("==> GPU rows written to #{if quick, do: out, else: "bench/results/gpu.md"}")
      else
        raise "bench/gpu/rows.sh failed (exit #{status})"
      end
    else
      {:error, reason} -> skip.(reason)
    end
end
