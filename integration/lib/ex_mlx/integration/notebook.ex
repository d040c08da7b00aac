defmodule ExMLX.Integration.Notebook do
  @moduledoc """
  Runs a Livebook notebook's Elixir cells in order, as Livebook would, in
  this project's VM: the `Mix.install` cell is skipped (this project's
  dependencies stand for it), every other cell is evaluated with the
  bindings of the cells before it. A cell that raises fails the run with the
  notebook's file and line.
  """

  @doc "The Elixir cells of a `.livemd` file: `[{first_line, code}]`."
  @spec cells(Path.t()) :: [{pos_integer(), String.t()}]
  def cells(path) do
    path
    |> File.read!()
    |> String.split("\n")
    |> Enum.with_index(1)
    |> Enum.reduce({[], nil}, fn
      {"```elixir", line}, {cells, nil} -> {cells, {line + 1, []}}
      {"```", _line}, {cells, {first, lines}} -> {[{first, lines} | cells], nil}
      {text, _line}, {cells, {first, lines}} -> {cells, {first, [text | lines]}}
      {_text, _line}, acc -> acc
    end)
    |> elem(0)
    |> Enum.reverse()
    |> Enum.map(fn {first, lines} -> {first, lines |> Enum.reverse() |> Enum.join("\n")} end)
  end

  @doc """
  Evaluates the notebook's cells (`Mix.install` skipped); returns each
  cell's value. Nx's global defaults that a cell changes are restored after.
  """
  @spec run!(Path.t()) :: [term()]
  def run!(path) do
    backend = Nx.default_backend()
    global_backend = Application.fetch_env!(:nx, :default_backend)
    defn_options = Application.fetch_env!(:nx, :default_defn_options)
    default_options = Nx.Defn.default_options()

    try do
      path
      |> cells()
      |> Enum.reject(fn {_line, code} -> code =~ "Mix.install(" end)
      |> Enum.map_reduce([], fn {line, code}, binding ->
        Code.eval_string(code, binding, file: path, line: line)
      end)
      |> elem(0)
    after
      Nx.default_backend(backend)
      Nx.global_default_backend(global_backend)
      Nx.Defn.global_default_options(defn_options)
      Nx.Defn.default_options(default_options)
    end
  end
end
