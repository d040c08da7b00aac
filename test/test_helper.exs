if Code.ensure_loaded?(Nx) do
  # The Nx doctests ExMLX.Backend does not pass, by name (each with its
  # reason in ExMLX.NxDoctestExclusions).
  ExUnit.start(exclude: ExMLX.NxDoctestExclusions.filters())
else
  IO.puts("""
  ExMLX.Backend tests skipped: Nx is not available. Set NX_PATH to an Nx \
  checkout (its nx/ folder), or install Hex so mix.exs can depend on Nx 0.12 or 0.13.
  """)

  ExUnit.start(exclude: [:nx])
end
