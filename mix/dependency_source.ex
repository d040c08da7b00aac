defmodule ExMLX.DependencySource do
  @moduledoc false
  # Where a dependency comes from, for mix.exs and integration/mix.exs (both
  # load this file before they define their project): a local checkout named
  # by an environment variable, else Hex when it is installed, else nowhere.

  @doc """
  `{:path, checkout}` when the environment variable `variable` names one,
  else `:hex` when Hex is installed, else `:none`.
  """
  def of(variable) do
    case System.get_env(variable) do
      path when is_binary(path) and path != "" -> {:path, Path.expand(path)}
      _ -> if hex_installed?(), do: :hex, else: :none
    end
  end

  defp hex_installed? do
    Code.ensure_loaded?(Hex) or
      Mix.path_for(:archives) |> Path.join("hex-*") |> Path.wildcard() |> Enum.any?()
  end
end
