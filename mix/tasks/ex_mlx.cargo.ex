defmodule Mix.Tasks.ExMlx.Cargo do
  @shortdoc "Runs cargo on native/ex_mlx with the MLX build environment"
  @moduledoc """
  Runs `cargo ARGS...` in `native/ex_mlx` with the same MLX runtime and
  environment the `ex_mlx_native` compiler uses, so `cargo test`, `cargo clippy`
  and friends build against the same MLX.

      mix ex_mlx.cargo test --release
      mix ex_mlx.cargo clippy --release -- -D warnings
  """
  use Mix.Task

  alias ExMLX.Build

  @impl true
  def run(args) do
    case Build.mlx_runtime() do
      {:ok, runtime} ->
        case Build.cargo(args, Build.cargo_env(runtime)) do
          0 -> :ok
          status -> Mix.raise("cargo #{Enum.join(args, " ")} failed (exit status #{status})")
        end

      {:error, message} ->
        Mix.raise("ex_mlx: " <> message)
    end
  end
end
