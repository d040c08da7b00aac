# The build support (the NIF's, and where Nx comes from) is plain Elixir loaded
# before the project is defined, so the `ex_mlx_native` compiler can run ahead
# of the Elixir compiler.
for file <- [
      "mix/dependency_source.ex",
      "mix/ex_mlx_build.ex",
      "mix/ex_mlx_precompiled.ex",
      "mix/tasks/compile.ex_mlx_native.ex",
      "mix/tasks/ex_mlx.cargo.ex",
      "mix/tasks/ex_mlx.precompile.ex"
    ] do
  Code.require_file(file, __DIR__)
end

defmodule ExMLX.MixProject do
  use Mix.Project

  @version "0.1.0"

  # Nx 0.12 is the line Bumblebee 0.7 asks for; both lines are tested
  # (README, "Installing").
  @nx_requirement "~> 0.12.0 or ~> 0.13.0"

  def project do
    [
      app: :ex_mlx,
      version: @version,
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      compilers: [:ex_mlx_native | Mix.compilers()],
      deps: deps(),
      elixirc_paths: elixirc_paths(Mix.env()),
      description: "Nx backend for Apple's MLX, as a Rust NIF",
      docs: [main: "readme", extras: ["README.md"]]
    ]
  end

  def application do
    [extra_applications: [:logger], mod: {ExMLX.Application, []}]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]

  # Nx is the one dependency, and it is optional for building and testing:
  #
  #   * NX_PATH=/path/to/nx/nx  - a local Nx checkout (path dependency)
  #   * Hex installed           - Nx from Hex, @nx_requirement (what users get)
  #   * neither                 - no Nx: ExMLX.Backend is not compiled and its
  #                               tests are skipped (the rest works and is tested)
  defp deps do
    case ExMLX.DependencySource.of("NX_PATH") do
      {:path, path} -> [{:nx, path: path}]
      :hex -> [{:nx, @nx_requirement}]
      :none -> []
    end
  end
end
