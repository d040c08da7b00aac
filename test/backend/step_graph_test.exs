if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.StepGraphTest do
    # EXMLX_STEP_GRAPH=PREFIX (native/ex_mlx/core/src/step_graph.rs): the
    # variable is read once per VM, so each case runs in a VM of its own.
    use ExUnit.Case, async: true

    # the primitives of a `print_graph` file's nodes, in order
    defp primitives(path) do
      path
      |> File.read!()
      |> String.split("\n", trim: true)
      |> Enum.drop(2)
      |> Enum.map(&hd(String.split(&1, " ")))
    end

    @tag :tmp_dir
    test "a program without loops writes its graph once, at its first call", %{tmp_dir: dir} do
      script = """
      {:ok, _} = Application.ensure_all_started(:ex_mlx)
      f = Nx.Defn.jit(fn x -> x |> Nx.dot(x) |> Nx.sum(axes: [1]) end, compiler: ExMLX.Compiler)
      x = Nx.tensor(for(i <- 1..4, do: for(j <- 1..4, do: i * j * 1.0)), backend: ExMLX.Backend)
      IO.puts(Enum.map_join(1..3, ";", fn _ -> Enum.map_join(Nx.to_flat_list(f.(x)), ",", &round/1) end))
      """

      {out, status} =
        ExMLX.TestHelpers.elixir(script, env: [{"EXMLX_STEP_GRAPH", Path.join(dir, "g")}])

      # x · x has (i, j) = i · j · 30 (the sum of k² for k in 1..4), rows
      # summed: 300 i
      rows = "300,600,900,1200"
      assert {status, out} == {0, "#{rows};#{rows};#{rows}\n"}
      assert File.ls!(dir) == ["g.program.0.txt"]
      assert primitives(Path.join(dir, "g.program.0.txt")) == ["Matmul", "Sum", "Squeeze"]
    end
  end
end
