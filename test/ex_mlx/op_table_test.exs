defmodule ExMLX.OpTableTest do
  # The op table has one source, native/ex_mlx/core/src/ops/table.rs. The
  # compiled NIF reports it (ExMLX.Native.op_table/0); Elixir reads the same
  # file's text at compile time (ExMLX.OpTable) to generate ExMLX's
  # functions. These tests check that the two readings agree, and that
  # every op has its function.
  use ExUnit.Case, async: true

  alias ExMLX.OpTable

  defp from_nif do
    for {name, family, inputs, params, results, flags} <- ExMLX.Native.op_table() do
      %{
        name: name,
        family: family,
        inputs: inputs,
        params: for({p, kind, default} <- params, do: {p, kind, default}),
        results: results,
        flags: flags
      }
    end
  end

  defp from_source do
    for entry <- OpTable.entries() do
      entry
      |> Map.take([:name, :family, :inputs, :results, :flags])
      |> Map.put(:params, for(p <- entry.params, do: {p.name, p.kind, p.default}))
    end
  end

  test "the NIF's table and the one Elixir read from table.rs are the same, in order" do
    nif = from_nif()
    source = from_source()
    assert length(nif) == length(source)
    assert length(nif) > 100

    for {n, s} <- Enum.zip(nif, source) do
      assert n == s
    end
  end

  test "every op without the nx or custom flag is a documented function of ExMLX" do
    {:docs_v1, _, :elixir, _, _, _, docs} = Code.fetch_docs(ExMLX)
    documented = for {{:function, name, _arity}, _, _, doc, _} <- docs, doc != :hidden, do: name

    for entry <- OpTable.entries(), :nx not in entry.flags do
      assert entry.name in documented, "ExMLX.#{entry.name} is missing or undocumented"

      if :custom not in entry.flags do
        assert entry.doc =~ "iex>", "the op table's entry for #{entry.name} has no example"
      end
    end
  end

  test "unknown ops, wrong inputs and wrong parameters are named errors" do
    t = ExMLX.iota({:f, 32}, {2, 3})

    assert {:error,
            {:argument, "op: unknown op :frobnicate (ExMLX.Native.op_table/0 lists them)"}} =
             ExMLX.Native.op(make_ref(), :frobnicate, [t.ref], [])

    assert {:error, {:argument, "inputs: add takes 2 tensors (a, b), got 1"}} =
             ExMLX.Native.op(make_ref(), :add, [t.ref], [])

    assert {:error, {:argument, "params: sum takes 2 parameters (axes, keep_dims), got 0"}} =
             ExMLX.Native.op(make_ref(), :sum, [t.ref], [])

    assert {:error, {:argument, "keep_dims: expected true or false, got: 3"}} =
             ExMLX.Native.op(make_ref(), :sum, [t.ref], [nil, 3])

    assert {:error, {:argument, "direction: expected one of :asc, :desc, got: :up"}} =
             ExMLX.Native.op(make_ref(), :sort, [t.ref], [-1, :up])

    assert {:error, {:argument, "tensors: needs at least one tensor"}} =
             ExMLX.Native.op(make_ref(), :concatenate, [], [0])
  end

  test "the op table's type rules hold for the element-wise ops on f32 and s32" do
    rule_type = fn
      :same, t -> t
      :bool, _ -> :bool
      :float, {:s, _} -> {:f, 32}
      :float, t -> t
      :real, t -> t
      _, _ -> nil
    end

    for entry <- OpTable.entries(),
        entry.family == :unary,
        type <- [{:f, 32}, {:s, 32}],
        expected = rule_type.(hd(entry.results), type) do
      t = ExMLX.full(1, type, {2})

      case (try do
              apply(ExMLX, entry.name, [t])
            rescue
              e in ExMLX.Error -> e
            end) do
        %ExMLX.Tensor{type: got} -> assert got == expected, "#{entry.name} on #{inspect(type)}"
        # bitwise ops refuse floats: that is a type error, not a wrong rule
        %ExMLX.Error{kind: :type} -> assert type == {:f, 32}
      end
    end
  end
end
