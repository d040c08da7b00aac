if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Compiler.RepeatedHeads do
    @moduledoc false

    alias Nx.Defn.Expr
    alias Nx.Tensor, as: T

    # Grouped-query attention's repeated heads in an `Nx.Defn.Expr` graph:
    # a `{batch, sequence, heads, depth}` tensor whose heads are each of the
    # `heads / groups` heads of a source `x` repeated `groups` times in a
    # row (head `j` is `x`'s head `div(j, groups)`: Bumblebee's
    # `repeat_interleave` of the keys and values before its cache, made of
    # `new_axis`, `tile` and `flatten`). ExMLX.Compiler.CacheLayout uses it
    # to keep such a cache at `x`'s head count.
    #
    # What a chain of reshapes and broadcasts computes is followed on the
    # shapes alone: each axis of each node is tagged with where its index
    # comes from (`x`'s axis 0 to 3, `:group` for the broadcast's new axis,
    # `{:merged, outer, inner}` for two adjacent axes a reshape joined, `nil`
    # for axes of length 1), so the answer never depends on the sizes.

    # `{:ok, x, groups}` if `expr` (rank 4) is `x`'s heads (axis 2) each
    # repeated `groups` (> 1) times in a row through reshapes, broadcasts
    # and metadata; `:error` otherwise.
    def source(%T{shape: {_, _, heads, _}} = expr) do
      with {:ok, x, chain} <- chain(expr, heads, []),
           {b, s, kv_heads, d} = x.shape,
           true <- kv_heads > 1 and rem(heads, kv_heads) == 0 and expr.shape == {b, s, heads, d},
           {:ok, tags} <- follow(chain, tags(x.shape, [0, 1, 2, 3])),
           true <- tags == tags(expr.shape, [0, 1, {:merged, 2, :group}, 3]) do
        {:ok, x, div(heads, kv_heads)}
      else
        _ -> :error
      end
    end

    def source(_expr), do: :error

    # Whether every value of `expr` (`{batch, sequence, heads, depth}`) is
    # known to repeat its heads in groups of `groups`: a constant, a broadcast
    # along the heads, a repeat (`source/1`) of that many, or a `put_slice` of
    # such a value at head 0 into another such value.
    def repeated?(%T{data: %Expr{op: :metadata, args: [inner, _]}}, groups),
      do: repeated?(inner, groups)

    def repeated?(%T{data: %Expr{op: :constant}}, _groups), do: true

    def repeated?(%T{data: %Expr{op: :broadcast, args: [t, shape, axes]}}, _groups),
      do:
        not Enum.any?(Enum.zip(axes, Tuple.to_list(t.shape)), &match?({2, n} when n > 1, &1)) and
          tuple_size(shape) == 4

    def repeated?(%T{data: %Expr{op: :put_slice, args: [tensor, starts, update]}}, groups) do
      zero?(Enum.at(starts, 2)) and elem(update.shape, 2) == elem(tensor.shape, 2) and
        repeated?(tensor, groups) and
        (match?({:ok, _, ^groups}, source(update)) or repeated?(update, groups))
    end

    def repeated?(_expr, _groups), do: false

    defp zero?(0), do: true
    defp zero?(%T{data: %Expr{op: :constant, args: [0]}}), do: true
    defp zero?(%T{data: %Expr{op: :metadata, args: [inner, _]}}), do: zero?(inner)
    defp zero?(_start), do: false

    # The reshapes and broadcasts from `node` down to the first rank-4 node
    # with fewer than `heads` heads (the source), nearest the source first.
    defp chain(%T{data: %Expr{op: op, args: [inner | _]}} = node, heads, acc)
         when op in [:reshape, :broadcast, :metadata] do
      acc = if op == :metadata, do: acc, else: [node | acc]

      case inner do
        %T{shape: {_, _, k, _}} when k < heads -> {:ok, inner, acc}
        %T{data: %Expr{}} -> chain(inner, heads, acc)
        _ -> :error
      end
    end

    defp chain(_node, _heads, _acc), do: :error

    defp follow([], tags), do: {:ok, tags}

    defp follow([%T{data: %Expr{op: :reshape, args: [input]}, shape: shape} | rest], tags) do
      with {:ok, tags} <- reshape(tags, input.shape, shape), do: follow(rest, tags)
    end

    defp follow([%T{data: %Expr{op: :broadcast, args: [input, shape, axes]}} | rest], tags) do
      with {:ok, tags} <- broadcast(tags, input.shape, shape, axes), do: follow(rest, tags)
    end

    defp follow(_chain, _tags), do: :error

    # A node's tags: `names` for its axes, nil for those of length 1.
    defp tags(shape, names) do
      shape
      |> Tuple.to_list()
      |> Enum.zip(names)
      |> Enum.map(fn {n, t} -> if n == 1, do: nil, else: t end)
    end

    # A reshape keeps the row-major order: the axes longer than 1 stay the
    # same, or two adjacent ones join.
    defp reshape(tags, from, to) do
      kept = for {t, n} <- Enum.zip(tags, Tuple.to_list(from)), n > 1, do: {t, n}
      sizes = for n <- Tuple.to_list(to), n > 1, do: n

      new =
        if Enum.map(kept, &elem(&1, 1)) == sizes,
          do: Enum.map(kept, &elem(&1, 0)),
          else: joined([], kept, sizes)

      if new, do: {:ok, place(new, to)}, else: :error
    end

    # `kept`'s tags with the first adjacent pair whose joining gives `sizes`
    # joined (`before` the pairs passed, last first); nil if none does
    defp joined(before, [{a, m}, {b, n} | rest], sizes) do
      joined = Enum.reverse(before, [{{:merged, a, b}, m * n} | rest])

      if Enum.map(joined, &elem(&1, 1)) == sizes,
        do: Enum.map(joined, &elem(&1, 0)),
        else: joined([{a, m} | before], [{b, n} | rest], sizes)
    end

    defp joined(_before, _kept, _sizes), do: nil

    defp place(tags, shape) do
      {placed, []} =
        shape
        |> Tuple.to_list()
        |> Enum.map_reduce(tags, fn
          1, rest -> {nil, rest}
          _n, [t | rest] -> {t, rest}
        end)

      placed
    end

    # Nx's broadcast: input axis `i` is output axis `axes[i]`; an output axis
    # longer than its input axis (or not an input's) repeats: the group axis,
    # of which there is one.
    defp broadcast(tags, from, to, axes) do
      inputs = Map.new(Enum.zip(axes, Enum.zip(tags, Tuple.to_list(from))))

      new =
        to
        |> Tuple.to_list()
        |> Enum.with_index()
        |> Enum.map(fn {n, j} ->
          case inputs do
            %{^j => {t, ^n}} -> t
            _ when n == 1 -> nil
            _ -> :group
          end
        end)

      groups = Enum.count(new, &(&1 == :group))
      if groups <= 1 and groups >= Enum.count(tags, &(&1 == :group)), do: {:ok, new}, else: :error
    end
  end
end
