defmodule ExMLX.Integration.Requirements do
  @moduledoc """
  Whether a notebook's `Mix.install` cell names versions that resolve
  together, checked against the packages this project builds with.

  A package is read from its `mix.exs` (its version, and the requirement
  of each dependency it declares), never loaded. For a cell and a set of
  packages (by app: this project's dependencies, `packages/0`):

    * a **mismatch** is a requirement of the cell that the package at hand
      does not meet (the cell asks for `nx ~> 0.12.0`, this project runs Nx
      0.13.1): the notebook is not for this configuration;
    * a **conflict** is a requirement that a package the cell installs
      (directly or through another) declares on another such package, and
      that the version the cell gets does not meet (Bumblebee 0.7.0
      requires `nx ~> 0.12.0`, the cell's Nx is 0.13.1): `Mix.install`
      refuses the cell. Conflicts are looked for only where there is no
      mismatch (the packages at hand are then versions the cell gets).
  """

  @type requirement :: String.t() | :path
  @type package :: %{version: String.t() | nil, deps: [{atom(), String.t()}]}

  @doc """
  The dependencies the `Mix.install` cell of the notebook at `path` names:
  `[{app, requirement}]`, `:path` for one given by `path:` (or another
  option without a version).

      iex> dir = System.tmp_dir!()
      iex> path = Path.join(dir, "requirements_doctest.livemd")
      iex> File.write!(path, "# A\\n\\n```elixir\\nMix.install([{:nx, \\"~> 0.13\\"}, {:ex_mlx, path: \\"..\\"}])\\n```\\n")
      iex> ExMLX.Integration.Requirements.install_cell(path)
      [nx: "~> 0.13", ex_mlx: :path]
  """
  @spec install_cell(Path.t()) :: [{atom(), requirement()}]
  def install_cell(path) do
    code =
      path
      |> ExMLX.Integration.Notebook.cells()
      |> Enum.find_value(fn {_line, code} -> if code =~ "Mix.install(", do: code end) ||
        raise ArgumentError, "#{path} has no Mix.install cell"

    {_, found} =
      code
      |> Code.string_to_quoted!(file: path)
      |> Macro.prewalk(nil, fn
        {{:., _, [{:__aliases__, _, [:Mix]}, :install]}, _, [deps | _]} = node, nil ->
          {node, deps}

        node, acc ->
          {node, acc}
      end)

    Enum.map(found || [], fn
      {app, requirement} when is_atom(app) and is_binary(requirement) ->
        {app, requirement}

      {app, opts} when is_atom(app) and is_list(opts) ->
        {app, :path}

      {:{}, _, [app, requirement, _opts]} when is_binary(requirement) ->
        {app, requirement}

      other ->
        raise ArgumentError, "#{path}: cannot read the dependency #{Macro.to_string(other)}"
    end)
  end

  @doc """
  The version and the declared dependency requirements of the package whose
  `mix.exs` is in `dir`. Module attributes holding strings (`@version`,
  `{:nx, @nx_requirement}`) are resolved; dependencies without a version
  (`path:` only) are left out. A version computed by a function is `nil`.
  """
  @spec package(Path.t()) :: package()
  def package(dir) do
    file = Path.join(dir, "mix.exs")
    ast = file |> File.read!() |> Code.string_to_quoted!(file: file)

    {_, attributes} =
      Macro.prewalk(ast, %{}, fn
        {:@, _, [{name, _, [value]}]} = node, acc when is_binary(value) ->
          {node, Map.put(acc, name, value)}

        node, acc ->
          {node, acc}
      end)

    string = fn
      value when is_binary(value) -> value
      {:@, _, [{name, _, _}]} -> Map.get(attributes, name)
      _ -> nil
    end

    {_, version} =
      Macro.prewalk(ast, nil, fn
        {:version, value} = node, nil -> {node, string.(value)}
        node, acc -> {node, acc}
      end)

    {_, deps} =
      Macro.prewalk(ast, [], fn
        {kind, _, [{:deps, _, _} | _]} = node, acc when kind in [:def, :defp] ->
          {node, acc ++ declared_deps(node, string)}

        node, acc ->
          {node, acc}
      end)

    %{version: version, deps: deps}
  end

  defp declared_deps(ast, string) do
    {_, deps} =
      Macro.prewalk(ast, [], fn
        {app, requirement} = node, acc when is_atom(app) ->
          {node, add_dep(acc, app, string.(requirement))}

        {:{}, _, [app, requirement, _opts]} = node, acc when is_atom(app) ->
          {node, add_dep(acc, app, string.(requirement))}

        node, acc ->
          {node, acc}
      end)

    Enum.reverse(deps)
  end

  defp add_dep(acc, app, requirement) when is_binary(requirement) do
    case Version.parse_requirement(requirement) do
      {:ok, _} -> if {app, requirement} in acc, do: acc, else: [{app, requirement} | acc]
      :error -> acc
    end
  end

  defp add_dep(acc, _app, _requirement), do: acc

  @doc """
  The packages this project builds with, by app (`Mix.Project.deps_paths/0`,
  ExMLX among them), each with the version of its compiled application.
  """
  @spec packages() :: %{atom() => package()}
  def packages do
    for {app, dir} <- Mix.Project.deps_paths(),
        File.exists?(Path.join(dir, "mix.exs")),
        Application.load(app) in [:ok, {:error, {:already_loaded, app}}],
        into: %{},
        do: {app, %{package(dir) | version: to_string(Application.spec(app, :vsn))}}
  end

  @doc """
  Checks `cell` (from `install_cell/1`) against `packages`:
  `%{mismatches: [message], conflicts: [message]}` (see the moduledoc).

      iex> packages = %{
      ...>   nx: %{version: "0.13.1", deps: []},
      ...>   bumblebee: %{version: "0.7.0", deps: [nx: "~> 0.12.0"]}
      ...> }
      iex> ExMLX.Integration.Requirements.check([nx: "~> 0.13", bumblebee: "~> 0.7"], packages)
      %{
        mismatches: [],
        conflicts: ["bumblebee 0.7.0 requires nx ~> 0.12.0, and the cell's nx is 0.13.1"]
      }
  """
  @spec check([{atom(), requirement()}], %{atom() => package()}) :: %{
          mismatches: [String.t()],
          conflicts: [String.t()]
        }
  def check(cell, packages) do
    mismatches =
      for {app, requirement} <- cell, is_binary(requirement) do
        case packages do
          %{^app => %{version: version}} ->
            if not Version.match?(version, requirement),
              do: "the cell asks for #{app} #{requirement}; the package at hand is #{version}"

          %{} ->
            "the cell asks for #{app} #{requirement}; no such package is at hand to check it"
        end
      end
      |> Enum.reject(&is_nil/1)

    checked = if mismatches == [], do: installed(Keyword.keys(cell), packages), else: []

    conflicts =
      for app <- checked,
          {dep, requirement} <- packages[app].deps,
          Map.has_key?(packages, dep),
          version = packages[dep].version,
          not Version.match?(version, requirement) do
        "#{app} #{packages[app].version} requires #{dep} #{requirement}, " <>
          "and the cell's #{dep} is #{version}"
      end

    %{mismatches: mismatches, conflicts: conflicts}
  end

  # The cell's apps and, transitively, their dependencies among `packages`.
  defp installed(apps, packages), do: reachable(apps, packages, MapSet.new())

  defp reachable([], packages, seen),
    do: seen |> Enum.filter(&Map.has_key?(packages, &1)) |> Enum.sort()

  defp reachable([app | rest], packages, seen) do
    if app in seen do
      reachable(rest, packages, seen)
    else
      deps = if Map.has_key?(packages, app), do: Keyword.keys(packages[app].deps), else: []
      reachable(rest ++ deps, packages, MapSet.put(seen, app))
    end
  end
end
