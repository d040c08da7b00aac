# No test has a wall-clock bound that load can reach (ExUnit's default is
# 60 s a test): on a busy machine a test is slow, not failed; bin/soak runs
# the suite beside CPU burners to find slowness.
if Code.ensure_loaded?(Nx) do
  # The Nx doctests ExMLX.Backend does not pass, by name (each with its
  # reason in ExMLX.NxDoctestExclusions).
  ExUnit.start(exclude: ExMLX.NxDoctestExclusions.filters(), timeout: :infinity)
else
  IO.puts("""
  ExMLX.Backend tests skipped: Nx is not available. Set NX_PATH to an Nx \
  checkout (its nx/ folder), or install Hex so mix.exs can depend on Nx 0.12 or 0.13.
  """)

  ExUnit.start(exclude: [:nx], timeout: :infinity)
end
