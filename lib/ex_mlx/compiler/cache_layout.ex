if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Compiler.CacheLayout do
    @moduledoc false
    # Which values of a `while` loop's state ExMLX.Compiler with `fuse: true`
    # keeps with their axes 1 and 2 swapped: a key/value cache that the loop
    # writes `{batch, position, heads, depth}` and reads only through
    # `transpose(axes: [0, 2, 1, 3])` (Bumblebee's attention cache and its
    # attention). Held `{batch, heads, position, depth}` instead, each step
    # writes its update transposed (a few rows) and the attention reads the
    # cache as it is stored, instead of MLX reading the whole cache through
    # a strided view every step (docs/decisions/0017-heads-first-caches.md).
    # The values are the same ones; only where they are stored changes.
    #
    # A state value `i` (rank 4) qualifies when, in the loop's condition and
    # body (one scope: nested functions and loops have their own
    # parameters), its parameter's only reader is one `put_slice` of it
    # (`p`), `p` is the body's value `i` and no other, and every other
    # reader of `p` is a `transpose` with axes `[0, 2, 1, 3]`, directly or
    # through `metadata` nodes (Axon's layer names). Then ExMLX.Compiler.Lowering
    # enters the loop with the value transposed, writes `p` with its start
    # indices and update swapped likewise, reads `p`'s value for each of
    # those transposes, and transposes the loop's result back.

    alias ExMLX.Compiler.{FusedKernels, RepeatedHeads}
    alias Nx.Defn.{Composite, Expr, Tree}
    alias Nx.Tensor, as: T

    @swap [0, 2, 1, 3]

    @typedoc """
    `leaves`: the state's indices held swapped, each to its head groups (1,
    or `g` when the cache repeats each head `g` times and is held at its
    source's head count: ExMLX.Compiler.RepeatedHeads); `actions`: node ids
    of the body to what the lowering does instead of the node
    (`{:write, update}`, the `put_slice` writing `update`, or
    `{:read, p, g}`, a transpose that is `p`'s value, its heads repeated
    `g` times).
    """
    @type plan :: %{leaves: %{non_neg_integer() => pos_integer()}, actions: map()}

    @doc "A plan that changes nothing."
    def none, do: %{leaves: %{}, actions: %{}}

    @doc """
    The plan of a `while` node's arguments: `initial` (the expressions of
    its initial state), `arg` (its parameters), `pred` and `body`. With
    `grouped: false` a cache keeps every head even where it repeats them.
    """
    def plan(initial, arg, pred, body, opts \\ []) do
      grouped = Keyword.get(opts, :grouped, true)
      initials = Composite.flatten_list([initial])
      params = Composite.flatten_list([arg])
      outputs = Composite.flatten_list([body])
      readers = readers({pred, body})

      if length(params) == length(outputs) and length(params) == length(initials) do
        [params, initials]
        |> Enum.zip()
        |> Enum.with_index()
        |> Enum.reduce(none(), fn {{param, initial}, i}, plan ->
          case swapped(param, initial, grouped, i, outputs, readers) do
            {:ok, groups, actions} ->
              %{
                leaves: Map.put(plan.leaves, i, groups),
                actions: Map.merge(plan.actions, actions)
              }

            :error ->
              plan
          end
        end)
      else
        none()
      end
    end

    @doc """
    The loop's initial values (a flat list), as the plan holds them;
    `stored` maps indices to values already made so (from
    `initial_write/1`'s parts).
    """
    def enter(values, %{leaves: leaves}, stored) do
      map_at(values, leaves, fn v, groups, i ->
        case stored do
          %{^i => value} -> value
          %{} -> v |> heads_of(groups) |> swap()
        end
      end)
    end

    # every `groups`-th head of `v` (the first of each repeat)
    defp heads_of(v, 1), do: v

    defp heads_of(%T{shape: {b, t, h, d}} = v, groups),
      do: Nx.slice(v, [0, 0, 0, 0], [b, t, h, d], strides: [1, 1, groups, 1])

    @doc "The loop's results (a flat list), back in Nx's layout."
    def leave(values, %{leaves: leaves}),
      do: map_at(values, leaves, fn v, groups, _i -> unstored(v, groups) end)

    @doc "A stored cache in Nx's layout again: its axes swapped back, its heads repeated."
    def unstored(v, groups), do: v |> swap() |> repeat(2, groups)

    @doc """
    The parts of a planned loop's initial value that can be written as the
    loop stores it: `{:ok, write, zeros, starts, update}` when `expr` is
    `write`, a `put_slice` (under metadata) of `update` into a constant (a
    prompt's cache made from zeros), else `:error`.
    """
    def initial_write(expr) do
      case FusedKernels.without_metadata(expr) do
        %T{data: %Expr{op: :put_slice, args: [%T{data: %Expr{op: :constant}} = c, starts, u]}} =
            write ->
          {:ok, write, c, starts, u}

        _ ->
          :error
      end
    end

    @doc """
    `{:ok, number}` when a planned loop's initial value `expr` is a
    constant (under metadata: the zeros of a cache not yet written), else
    `:error`.
    """
    def initial_constant(expr) do
      case FusedKernels.without_metadata(expr) do
        %T{data: %Expr{op: :constant, args: [number]}} -> {:ok, number}
        _ -> :error
      end
    end

    @doc "The shape a planned cache of `shape` is stored in, at `groups`."
    def stored_shape({b, t, h, d}, groups), do: {b, div(h, groups), t, d}

    @doc "What a write of `update` into a cache at `groups` stores (a repeat's source)."
    def stored_update(update, 1), do: update

    def stored_update(update, groups) do
      {:ok, source, ^groups} = RepeatedHeads.source(update)
      source
    end

    @doc "A stored cache `p` as a transpose of the planned loop reads it."
    def read(p, groups), do: repeat(p, 1, groups)

    @doc "`x` with its axes 1 and 2 swapped (a value of the lowering)."
    def swap(x), do: Nx.transpose(x, axes: @swap)

    @doc "The start indices of a swapped write: the axes' order of `swap/1`."
    def swap_starts([s0, s1, s2, s3]), do: [s0, s2, s1, s3]

    # `x` with each index of `axis` repeated `groups` times in a row
    defp repeat(x, _axis, 1), do: x

    defp repeat(x, axis, groups) do
      shape = Tuple.to_list(x.shape)
      wide = List.insert_at(shape, axis + 1, groups)
      merged = List.update_at(shape, axis, &(&1 * groups))

      x
      |> Nx.new_axis(axis + 1)
      |> Nx.broadcast(List.to_tuple(wide))
      |> Nx.reshape(List.to_tuple(merged))
    end

    defp map_at(values, leaves, _fun) when map_size(leaves) == 0, do: values

    defp map_at(values, leaves, fun) do
      values
      |> Enum.with_index()
      |> Enum.map(fn {v, i} ->
        case leaves do
          %{^i => groups} -> fun.(v, groups, i)
          %{} -> v
        end
      end)
    end

    defp swapped(
           %T{shape: {_, _, _, _}, data: %Expr{op: :parameter, id: id}},
           initial,
           grouped,
           i,
           outputs,
           readers
         ) do
      with [
             %T{
               data: %Expr{
                 op: :put_slice,
                 id: p_id,
                 args: [%T{data: %Expr{id: ^id}}, starts, update]
               }
             } = p
           ] <-
             Map.get(readers, id, []),
           false <- refers?(update, id) or Enum.any?(starts, &refers?(&1, id)),
           [^i] <- output_indices(outputs, p_id),
           {:ok, transposes} <- transposes(p, readers),
           true <- transposes != [] do
        {groups, written} = if grouped, do: groups(update, initial), else: {1, update}
        reads = Map.new(transposes, &{&1.data.id, {:read, p, groups}})
        {:ok, groups, Map.put(reads, p_id, {:write, written})}
      else
        _ -> :error
      end
    end

    defp swapped(_param, _initial, _grouped, _i, _outputs, _readers), do: :error

    # How many times the cache repeats each head, and what a step writes:
    # the update's source and its groups when the update repeats heads and
    # the initial value is known to (ExMLX.Compiler.RepeatedHeads), else 1
    # and the update.
    defp groups(update, initial) do
      with {:ok, source, groups} <- RepeatedHeads.source(update),
           true <- RepeatedHeads.repeated?(initial, groups) do
        {groups, source}
      else
        _ -> {1, update}
      end
    end

    defp refers?(%T{data: %Expr{id: id}}, id), do: true
    defp refers?(_expr, _id), do: false

    defp output_indices(outputs, id) do
      for {%T{data: %Expr{id: ^id}}, i} <- Enum.with_index(outputs), do: i
    end

    # The transposes reading `node` (through metadata nodes), or `:error`
    # if anything else reads it.
    defp transposes(%T{data: %Expr{id: id}}, readers) do
      readers
      |> Map.get(id, [])
      |> Enum.reduce_while({:ok, []}, fn reader, {:ok, acc} ->
        case reader do
          %T{data: %Expr{op: :transpose, args: [_, @swap]}} ->
            {:cont, {:ok, [reader | acc]}}

          %T{data: %Expr{op: :metadata}} ->
            case transposes(reader, readers) do
              {:ok, more} -> {:cont, {:ok, more ++ acc}}
              :error -> {:halt, :error}
            end

          _ ->
            {:halt, :error}
        end
      end)
    end

    # Every node of the scope of `exprs` by id to the distinct nodes that
    # take it as an argument.
    defp readers(exprs) do
      {_, {_seen, readers}} = Composite.traverse(exprs, {%{}, %{}}, &visit/2)
      Map.new(readers, fn {id, nodes} -> {id, Enum.uniq_by(nodes, & &1.data.id)} end)
    end

    defp visit(%T{data: %Expr{id: id}} = node, {seen, readers} = acc) do
      if is_map_key(seen, id) do
        {node, acc}
      else
        Tree.apply_args(node, :scope, {Map.put(seen, id, true), readers}, fn
          %T{data: %Expr{id: arg}} = t, {seen, readers} ->
            visit(t, {seen, Map.update(readers, arg, [node], &[node | &1])})

          other, acc ->
            {other, acc}
        end)
        |> then(fn {_args, acc} -> {node, acc} end)
      end
    end

    defp visit(other, acc), do: {other, acc}
  end
end
