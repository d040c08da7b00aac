defmodule ExMLX.Prediction do
  @moduledoc false
  # The shape and type of element-wise and matrix product results, predicted
  # by MLX's own rules so that `ExMLX.add/2`, `ExMLX.sin/1`, their kin and
  # `ExMLX.matmul/2` can return at once and let the worker build the graph
  # in the background (deferred mode, see ExMLX.Call.defer_exact/3). The worker checks every prediction against
  # what MLX produced; a wrong one is an `:internal` error, never a silent
  # cast.
  #
  # Types: MLX's promotion, read from MLX itself (one 0-d operation per
  # pair of types, the first time an operation is used) rather than copied
  # into a table here. Shapes: NumPy broadcasting, which MLX follows.

  alias ExMLX.Op

  @types [:bool, {:u, 8}, {:u, 16}, {:u, 32}, {:u, 64}, {:s, 8}, {:s, 16}, {:s, 32}] ++
           [{:s, 64}, {:f, 16}, {:bf, 16}, {:f, 32}, {:f, 64}, {:c, 64}]

  @doc """
  `{:ok, shape, type}` for `op(a, b)`, or `:unknown` where the call should
  go the synchronous way (shapes that do not broadcast, types MLX refuses,
  tensors on different devices): there MLX's own error is raised at once.
  """
  def binary(op, %{shape: sa, type: ta, device: da}, %{shape: sb, type: tb, device: db})
      when da == db do
    case types(op) do
      %{^ta => %{^tb => type}} ->
        case broadcast(sa, sb) do
          {:ok, shape} -> {:ok, shape, type}
          :error -> :unknown
        end

      _ ->
        :unknown
    end
  end

  def binary(_op, _a, _b), do: :unknown

  @doc """
  `{:ok, shape, type}` for the element-wise unary `op(a)`: `a`'s shape and the
  type MLX gives for `a`'s (read from MLX like the binary ops' types), or
  `:unknown` for a type MLX refuses for `op` (its error is then raised at the
  call).
  """
  def unary(op, %{shape: shape, type: type}) do
    case types(op) do
      %{^type => result} -> {:ok, shape, result}
      _ -> :unknown
    end
  end

  @doc """
  `{:ok, shape, type}` for `matmul(a, b)` where MLX's own matrix product
  computes it: an operand of a floating or complex type (integers are
  multiplied exactly by ExMLX, on its own path), both of rank 2 or more,
  equal contracted sizes and batch axes that broadcast. The type is MLX's
  promotion of the two (the one element-wise addition gives); the shape is
  the broadcast batch axes, then the rows of `a` and the columns of `b`.
  Else `:unknown`.
  """
  def matmul(%{shape: sa, type: ta, device: da}, %{shape: sb, type: tb, device: db})
      when da == db and tuple_size(sa) >= 2 and tuple_size(sb) >= 2 do
    {batch_a, [m, k]} = sa |> Tuple.to_list() |> Enum.split(-2)
    {batch_b, [k_b, n]} = sb |> Tuple.to_list() |> Enum.split(-2)

    with true <- inexact?(ta) or inexact?(tb),
         true <- k == k_b,
         %{^ta => %{^tb => type}} <- types(:add),
         {:ok, batch} <- broadcast(List.to_tuple(batch_a), List.to_tuple(batch_b)) do
      {:ok, List.to_tuple(Tuple.to_list(batch) ++ [m, n]), type}
    else
      _ -> :unknown
    end
  end

  def matmul(_a, _b), do: :unknown

  defp inexact?({kind, _}), do: kind in [:f, :bf, :c]
  defp inexact?(_type), do: false

  @doc "NumPy's broadcasting of two shapes (tuples)."
  def broadcast(a, a), do: {:ok, a}

  def broadcast(a, b) do
    rank = max(tuple_size(a), tuple_size(b))
    pad = fn s -> List.duplicate(1, rank - tuple_size(s)) ++ Tuple.to_list(s) end

    Enum.zip(pad.(a), pad.(b))
    |> Enum.reduce_while([], fn
      {x, x}, acc -> {:cont, [x | acc]}
      {1, y}, acc -> {:cont, [y | acc]}
      {x, 1}, acc -> {:cont, [x | acc]}
      _, _ -> {:halt, :error}
    end)
    |> case do
      :error -> :error
      dims -> {:ok, dims |> Enum.reverse() |> List.to_tuple()}
    end
  end

  # For a binary op, type_a => type_b => result type, for the pairs MLX
  # accepts; for a unary op, type => result type. (Maps of 14 keys are flat
  # maps, looked up without hashing: this is on the path of every
  # element-wise op.)
  defp types(op) do
    key = {__MODULE__, op}

    case :persistent_term.get(key, nil) do
      nil ->
        table = read_types(op)
        :persistent_term.put(key, table)
        table

      table ->
        table
    end
  end

  defp read_types(op) do
    zeros = Map.new(@types, fn t -> {t, Op.run(:full, [], [0, t, {}, :cpu])} end)
    result_type = fn inputs -> inputs |> then(&Op.run(op, &1, [])) |> elem(2) end

    if op in ExMLX.unary_ops() do
      for t <- @types, reduce: %{} do
        table ->
          {z, _, _, _} = zeros[t]

          try do
            Map.put(table, t, result_type.([z]))
          rescue
            ExMLX.Error -> table
          end
      end
    else
      for ta <- @types, tb <- @types, reduce: %{} do
        table ->
          {a, _, _, _} = zeros[ta]
          {b, _, _, _} = zeros[tb]

          try do
            type = result_type.([a, b])
            Map.update(table, ta, %{tb => type}, &Map.put(&1, tb, type))
          rescue
            ExMLX.Error -> table
          end
      end
    end
  end
end
