defmodule ExMLX.TriangleTest do
  # tril/triu (MLX's ops, one op-table entry each) against triangles cut out
  # of the same matrices by index arithmetic in Elixir.
  use ExUnit.Case, async: true
  import ExMLX.TestHelpers, only: [device_for: 1]

  # rows × cols matrices of `list` (row-major), the element (i, j) kept when
  # keep?.(j - i), else 0
  defp reference(list, rows, cols, keep?) do
    list
    |> Enum.chunk_every(rows * cols)
    |> Enum.flat_map(fn matrix ->
      for {x, n} <- Enum.with_index(matrix) do
        {i, j} = {div(n, cols), rem(n, cols)}
        if keep?.(j - i), do: x, else: zero(x)
      end
    end)
  end

  defp zero(x) when is_float(x), do: 0.0
  defp zero(x) when is_boolean(x), do: false
  defp zero(_), do: 0

  for {type, shape} <- [{{:s, 32}, {4, 5}}, {{:f, 64}, {5, 3}}, {{:u, 8}, {2, 3, 3}}] do
    test "tril and triu of #{inspect(shape)} #{inspect(type)}, diagonals -3 to 3" do
      shape = unquote(Macro.escape(shape))
      on = [device: device_for(unquote(type))]
      t = ExMLX.iota(unquote(type), shape, on) |> ExMLX.add(ExMLX.full(1, unquote(type), {}, on))
      list = ExMLX.to_list(t)
      rank = tuple_size(shape)
      {rows, cols} = {elem(shape, rank - 2), elem(shape, rank - 1)}

      for k <- -3..3 do
        assert ExMLX.tril(t, k: k) |> ExMLX.to_list() ==
                 reference(list, rows, cols, &(&1 <= k)),
               "tril k=#{k}"

        assert ExMLX.triu(t, k: k) |> ExMLX.to_list() ==
                 reference(list, rows, cols, &(&1 >= k)),
               "triu k=#{k}"
      end

      assert ExMLX.tril(t).shape == shape
      assert ExMLX.tril(t).type == unquote(type)
    end
  end

  test "booleans keep their type" do
    t = ExMLX.full(1, :bool, {2, 2})
    assert ExMLX.tril(t) |> ExMLX.to_list() == [true, false, true, true]
    assert ExMLX.triu(t).type == :bool
  end

  test "bad arguments are named errors" do
    assert_raise ExMLX.Error, "k: 4294967296 is out of range", fn ->
      ExMLX.tril(ExMLX.iota({:s, 32}, {2, 2}), k: 4_294_967_296)
    end

    assert_raise ExMLX.Error, "k: expected an integer, got: 1.5", fn ->
      ExMLX.triu(ExMLX.iota({:s, 32}, {2, 2}), k: 1.5)
    end

    assert_raise ArgumentError, ~r/unknown keys \[:diagonal\]/, fn ->
      ExMLX.tril(ExMLX.iota({:s, 32}, {2, 2}), diagonal: 1)
    end

    error = assert_raise ExMLX.Error, fn -> ExMLX.tril(ExMLX.iota({:s, 32}, {3})) end
    assert error.kind == :mlx
  end
end
