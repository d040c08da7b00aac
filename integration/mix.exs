Code.require_file("../mix/dependency_source.ex", __DIR__)

defmodule ExMLX.Integration.MixProject do
  use Mix.Project

  # What ExMLX's users run — Axon training, Bumblebee models, Livebook
  # notebooks — checked on ExMLX against independent references (Nx's
  # BinaryBackend, PyTorch). Each dependency comes from Hex, as a user gets
  # it, or from a local checkout named by an environment variable (for
  # machines without Hex): NX_PATH, POLARIS_PATH, AXON_PATH, BUMBLEBEE_PATH.
  # `bin/test` at the project's root runs this project when they are present
  # (integration/README.md).
  def project do
    [
      app: :ex_mlx_integration,
      version: "0.1.0",
      elixir: "~> 1.15",
      elixirc_paths: ["lib"],
      deps: deps()
    ]
  end

  def application, do: [extra_applications: [:logger]]

  # From Hex nothing is overridden: the versions resolve as in a user's
  # project (Bumblebee 0.7 brings Nx 0.12 and Axon 0.8). A checkout is a
  # path dependency, which must override the Hex requirement its dependents
  # declare; test/notebook_requirements_test.exs checks those requirements.
  defp deps do
    [{:ex_mlx, path: ".."}] ++
      Enum.flat_map(dependencies(), fn {app, source} ->
        case source do
          {:path, path} -> [{app, path: path, override: true}]
          {:hex, requirement} -> [{app, requirement}]
          :none -> []
        end
      end) ++ rustler()
  end

  # Bumblebee's tokenizers is a Rust NIF: from Hex it comes precompiled; a
  # checkout built from source (TOKENIZERS_BUILD=true) needs rustler's Mix
  # side, named by RUSTLER_PATH.
  defp rustler do
    case System.get_env("RUSTLER_PATH") do
      path when is_binary(path) and path != "" ->
        [{:rustler, path: Path.expand(path), optional: true, override: true}]

      _ ->
        []
    end
  end

  @doc """
  Where each dependency comes from: `{:path, checkout}` when its variable
  names one, else `{:hex, requirement}` when Hex is installed, else `:none`
  (the tests needing it are skipped and say so).
  """
  def dependencies do
    for {app, variable, requirement} <- [
          {:nx, "NX_PATH", "~> 0.12.0 or ~> 0.13.0"},
          {:polaris, "POLARIS_PATH", "~> 0.1"},
          {:axon, "AXON_PATH", "~> 0.8"},
          {:bumblebee, "BUMBLEBEE_PATH", "~> 0.7.0"}
        ] do
      case ExMLX.DependencySource.of(variable) do
        :hex -> {app, {:hex, requirement}}
        source -> {app, source}
      end
    end
  end
end
