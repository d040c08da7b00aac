defmodule ExMLX.ArchitectureTest do
  # docs/architecture.md promises module graphs without cycles in both Rust
  # crates: each module depends only on modules below it. This test reads
  # every `crate::module` and `super::module` reference outside comments
  # (tests included) and fails on a cycle, naming it.
  use ExUnit.Case, async: true

  @crates %{
    "the NIF crate" => "native/ex_mlx/src",
    "ex_mlx_core" => "native/ex_mlx/core/src"
  }

  # module name ("ops::table", "error", ...) => set of modules it references
  defp graph(root) do
    files = Path.wildcard(Path.join(root, "**/*.rs"))
    modules = MapSet.new(files, &module_of(root, &1))

    Map.new(files, fn file ->
      me = module_of(root, file)
      # (references in comments are not dependencies)
      text = file |> File.read!() |> String.replace(~r{//[^\n]*}, "")
      parent = me |> String.split("::") |> Enum.drop(-1) |> Enum.join("::")

      crate_refs =
        for [_, path] <- Regex.scan(~r/crate::((?:\w+::)*\w+)/, text), do: resolve(path, modules)

      super_refs =
        for [_, path] <- Regex.scan(~r/super::((?:\w+::)*\w+)/, text),
            parent != "" or String.contains?(file, "/ops/"),
            do: resolve(join(parent, path), modules)

      deps = (crate_refs ++ super_refs) |> Enum.reject(&(&1 in [nil, me])) |> MapSet.new()
      {me, deps}
    end)
  end

  defp join("", path), do: path
  defp join(parent, path), do: parent <> "::" <> path

  # The longest module prefix of a path (`ops::table::Op` -> `ops::table`).
  defp resolve(path, modules) do
    parts = String.split(path, "::")

    Enum.find_value(length(parts)..1//-1, fn n ->
      candidate = parts |> Enum.take(n) |> Enum.join("::")
      if candidate in modules, do: candidate
    end)
  end

  defp module_of(root, file) do
    file
    |> Path.relative_to(root)
    |> String.trim_trailing(".rs")
    |> String.replace_suffix("/mod", "")
    |> String.replace("/", "::")
  end

  # A cycle as a list of modules, or nil.
  defp find_cycle(graph) do
    Enum.find_value(Map.keys(graph), fn start -> walk(graph, start, [start]) end)
  end

  defp walk(graph, node, path) do
    Enum.find_value(Map.get(graph, node, []), fn dep ->
      cond do
        dep == List.last(path) -> Enum.reverse([dep | path])
        dep in path -> nil
        true -> walk(graph, dep, [dep | path])
      end
    end)
  end

  for {name, root} <- @crates do
    test "#{name} has no module cycle" do
      graph = graph(unquote(root))
      assert map_size(graph) > 5
      cycle = find_cycle(graph)
      assert cycle == nil, "module cycle in #{unquote(name)}: #{Enum.join(cycle || [], " -> ")}"
    end
  end

  test "the cycle finder finds a cycle" do
    assert find_cycle(%{"a" => MapSet.new(["b"]), "b" => MapSet.new(["a"])}) in [
             ["a", "b", "a"],
             ["b", "a", "b"]
           ]

    assert find_cycle(%{"a" => MapSet.new(["b"]), "b" => MapSet.new()}) == nil
  end

  # Every MLX call for a tensor runs on its device's worker, inside that
  # worker's stream (native/ex_mlx/core/src/worker.rs). mlx-rs's ops follow
  # that stream, except these, which use the default device's stream (the
  # GPU in a CUDA or Metal build) whatever the worker: a CPU tensor's op
  # built with them ran on the GPU, and f64 failed there. Their `_device`
  # forms, given `Stream::thread_local_or_default()`, are the ones to use.
  @stream_ignoring ~w(try_index try_index_mut StreamOrDevice::default Stream::new)

  test "no MLX call in either crate ignores the worker's stream" do
    for {_name, root} <- @crates, file <- Path.wildcard(Path.join(root, "**/*.rs")) do
      text = file |> File.read!() |> String.replace(~r{//[^\n]*}, "")

      for call <- @stream_ignoring do
        refute Regex.match?(~r/(\.|\b)#{Regex.escape(call)}\(/, text),
               "#{file} calls #{call}(...), which uses the default device's stream"
      end
    end
  end
end
