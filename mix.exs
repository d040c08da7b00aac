# The NIF build support is plain Elixir loaded before the project is defined, so
# the `ex_mlx_native` compiler can run ahead of the Elixir compiler.
for file <- [
      "mix/ex_mlx_build.ex",
      "mix/tasks/compile.ex_mlx_native.ex",
      "mix/tasks/ex_mlx.cargo.ex"
    ] do
  Code.require_file(file, __DIR__)
end

defmodule ExMLX.MixProject do
  use Mix.Project

  @version "0.1.0"

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
    [extra_applications: [:logger]]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]

  defp deps, do: []
end
