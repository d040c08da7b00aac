# No test has a wall-clock bound that load can reach (ExUnit's default is
# 60 s a test): on a busy machine a test is slow, not failed; bin/soak runs
# the suite beside CPU burners to find slowness.
# Tests of ExMLX's own CPU kernels (tagged :cpu_kernels) need them on;
# bin/test runs the suite a second time with EX_MLX_CPU_KERNELS=false.
kernels_off = if ExMLX.cpu_kernels?(), do: [], else: [:cpu_kernels]

if kernels_off != [] do
  IO.puts("ExMLX's CPU kernels are off (EX_MLX_CPU_KERNELS): every op is MLX's.\n")
end

# EXMLX_TEST_CALLERS=always runs every small op and read on the calling
# thread whenever the worker is idle (ex_mlx_core::worker::run_on_caller),
# =never on the worker; by default it depends on the machine's load.
case System.get_env("EXMLX_TEST_CALLERS") do
  mode when mode in ["always", "never"] ->
    ExMLX.Native.set_callers_run_for_test(String.to_atom(mode))
    IO.puts("Calling threads run a worker's small work: #{mode} (EXMLX_TEST_CALLERS).\n")

  _ ->
    :ok
end

if Code.ensure_loaded?(Nx) do
  # The Nx doctests ExMLX.Backend does not pass, by name (each with its
  # reason in ExMLX.NxDoctestExclusions).
  ExUnit.start(exclude: ExMLX.NxDoctestExclusions.filters() ++ kernels_off, timeout: :infinity)
else
  IO.puts("""
  ExMLX.Backend tests skipped: Nx is not available. Set NX_PATH to an Nx \
  checkout (its nx/ folder), or install Hex so mix.exs can depend on Nx 0.12 or 0.13.
  """)

  ExUnit.start(exclude: [:nx | kernels_off], timeout: :infinity)
end
