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

  @creations [:full, :iota, :eye]
  @i32_max 2_147_483_647

  @doc "The creation ops `creation/2` predicts."
  def creations, do: @creations

  @doc """
  `{:ok, shape, type}` for the creation op `op(params...)` (`creations/0`,
  with the op table's parameters: `[value, type, shape, device]` for `full`,
  `[type, shape, axis, device]` for `iota`, `[n, type, m, device]` for
  `eye`): the type asked for and the shape asked for (`{n, m}` for `eye`).
  `:unknown` for anything the op could refuse (a shape or axis out of
  range, a value `type` cannot hold exactly as an integer or boolean, a
  complex value, a type it does not know): its error is then raised at the
  call.
  """
  def creation(:full, [value, type, shape, _device]) do
    if type in @types and shape?(shape) and holds?(type, value),
      do: {:ok, shape, type},
      else: :unknown
  end

  def creation(:iota, [type, shape, axis, _device]) do
    rank = if is_tuple(shape), do: tuple_size(shape), else: 0

    if type in @types and shape?(shape) and Tuple.product(shape) <= @i32_max and
         (is_nil(axis) or (is_integer(axis) and axis >= 0 and axis < rank)),
       do: {:ok, shape, type},
       else: :unknown
  end

  def creation(:eye, [n, type, m, _device]) do
    m = m || n

    if type in @types and shape?({n, m}),
      do: {:ok, {n, m}, type},
      else: :unknown
  end

  def creation(_op, _params), do: :unknown

  defp shape?(shape) when is_tuple(shape) do
    shape |> Tuple.to_list() |> Enum.all?(&(is_integer(&1) and &1 >= 0 and &1 <= @i32_max))
  end

  defp shape?(_shape), do: false

  # Whether `value` is one `type` takes without an error: an integer in
  # range for integer types, 0 or 1 for booleans, a float, a special float
  # or an integer the NIF reads (a 64-bit one, signed or not) for the others.
  defp holds?({:s, bits}, v) when is_integer(v),
    do: v >= -Bitwise.bsl(1, bits - 1) and v < Bitwise.bsl(1, bits - 1)

  defp holds?({:u, bits}, v) when is_integer(v), do: v >= 0 and v < Bitwise.bsl(1, bits)
  defp holds?(:bool, v), do: v in [0, 1]

  defp holds?({kind, _}, v) when kind in [:f, :bf, :c] and is_integer(v),
    do: v >= -Bitwise.bsl(1, 63) and v < Bitwise.bsl(1, 64)

  defp holds?({kind, _}, v) when kind in [:f, :bf, :c],
    do: is_float(v) or v in [:nan, :infinity, :neg_infinity]

  defp holds?(_type, _v), do: false

  @reductions [:sum, :product, :all, :any, :mean, :reduce_min, :reduce_max]
  @arg_reductions [:argmax, :argmin]
  @cumulative [:cumulative_sum, :cumulative_product, :cumulative_min, :cumulative_max]

  @doc "The reductions `reduce/3` predicts."
  def reductions, do: @reductions ++ @arg_reductions ++ @cumulative

  @doc """
  `{:ok, shape, type}` for the reduction `op(a, params...)` (`reductions/0`,
  with the op table's parameters: `[axes, keep_dims]`, `[axis, keep_dims]`
  for argmax and argmin, `[axis, reverse]` for the cumulative ones), where
  ExMLX's rules give it: the axes valid and distinct (all of them when
  `nil`; argmax and argmin without an axis look at the flattened tensor),
  the reduced ones dropped or kept at size 1; the type MLX gives for `a`'s
  (read from MLX). `:unknown` for anything the op refuses (axes out of range
  or repeated, the minimum, maximum or arg-index of no elements, a type MLX
  refuses: its error is then raised at the call) and for a reduction over no
  axis (MLX keeps the input's type there).
  """
  def reduce(op, %{shape: shape, type: type}, params) do
    with {:ok, out} <- reduced_shape(op, shape, params),
         %{^type => result} <- types(op) do
      {:ok, out, result}
    else
      _ -> :unknown
    end
  end

  def reduce(_op, _a, _params), do: :unknown

  # The result's shape for `reduce/3`; `:error` where the op refuses it.
  defp reduced_shape(op, shape, [axes, keep]) when op in @reductions and is_boolean(keep) do
    with {:ok, [_ | _] = axes} <- axes(axes, tuple_size(shape)),
         false <- op in [:reduce_min, :reduce_max] and Tuple.product(shape) == 0 do
      {:ok, reduced(shape, axes, keep)}
    else
      _ -> :error
    end
  end

  defp reduced_shape(op, shape, [axis, keep])
       when op in @arg_reductions and is_boolean(keep) and (is_integer(axis) or is_nil(axis)) do
    if Tuple.product(shape) == 0, do: :error, else: arg_shape(shape, axis, keep)
  end

  defp reduced_shape(op, shape, [axis, reverse]) when op in @cumulative and is_boolean(reverse) do
    with {:ok, _} <- axes([axis], tuple_size(shape)), do: {:ok, shape}
  end

  defp reduced_shape(_op, _shape, _params), do: :error

  # Valid, distinct axes of a tensor of `rank`, normalized; `nil`: all.
  defp axes(nil, rank), do: {:ok, Enum.to_list(0..(rank - 1)//1)}

  defp axes(axes, rank) when is_list(axes) do
    normal = Enum.map(axes, fn a -> if is_integer(a) and a < 0, do: a + rank, else: a end)

    if Enum.all?(normal, &(is_integer(&1) and &1 >= 0 and &1 < rank)) and
         length(Enum.uniq(normal)) == length(normal),
       do: {:ok, normal},
       else: :error
  end

  defp axes(_axes, _rank), do: :error

  defp reduced(shape, axes, keep) do
    shape
    |> Tuple.to_list()
    |> Enum.with_index()
    |> Enum.flat_map(fn {d, i} ->
      cond do
        i not in axes -> [d]
        keep -> [1]
        true -> []
      end
    end)
    |> List.to_tuple()
  end

  defp arg_shape(shape, nil, true), do: {:ok, List.to_tuple(List.duplicate(1, tuple_size(shape)))}
  defp arg_shape(_shape, nil, false), do: {:ok, {}}

  defp arg_shape(shape, axis, keep) do
    case axes([axis], tuple_size(shape)) do
      {:ok, axes} -> {:ok, reduced(shape, axes, keep)}
      :error -> :error
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
    zeros = tensors({})
    type_of = fn inputs, params -> op |> Op.run(inputs, params) |> elem(2) end

    cond do
      op in ExMLX.unary_ops() ->
        one_input_types(zeros, &type_of.([&1], []))

      # (a one-element vector: the cumulative ops need an axis)
      op in @cumulative ->
        one_input_types(tensors({1}), &type_of.([&1], [0, false]))

      # (a reduction over a real axis: MLX gives a tensor reduced over no
      # axis its own type, which `reduce/3` leaves to the synchronous path)
      op in @reductions ->
        one_input_types(tensors({1}), &type_of.([&1], [[0], false]))

      op in @arg_reductions ->
        one_input_types(tensors({1}), &type_of.([&1], [0, false]))

      true ->
        binary_types(zeros, &type_of.([&1, &2], []))
    end
  end

  # type => a tensor of zeros of that type and `shape`, on the CPU
  defp tensors(shape),
    do: Map.new(@types, fn t -> {t, elem(Op.run(:full, [], [0, t, shape, :cpu]), 0)} end)

  defp one_input_types(inputs, type_of) do
    for t <- @types, reduce: %{} do
      table ->
        try do
          Map.put(table, t, type_of.(inputs[t]))
        rescue
          ExMLX.Error -> table
        end
    end
  end

  defp binary_types(zeros, type_of) do
    for ta <- @types, tb <- @types, reduce: %{} do
      table ->
        try do
          type = type_of.(zeros[ta], zeros[tb])
          Map.update(table, ta, %{tb => type}, &Map.put(&1, tb, type))
        rescue
          ExMLX.Error -> table
        end
    end
  end
end
