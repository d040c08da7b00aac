if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Distributed.Defn do
    @moduledoc """
    `ExMLX.Distributed`'s collectives on `Nx` tensors, inside `defn` and out.

        defn train_step(params, x, y) do
          grads = grad(params, &loss(&1, x, y))
          grads = ExMLX.Distributed.Defn.average_gradients(grads)
          update(params, grads)
        end

    Each is an `Nx.runtime_call/4`: outside `defn` it runs at once; inside,
    it is a node of the graph that runs when the graph reaches it, with the
    tensors computed so far. A collective waits for peers and exchanges data
    through MLX's group, which a compiled MLX program cannot do mid-way, so
    `ExMLX.Compiler` runs a function holding one on `Nx.Defn.Evaluator`
    (whose every other op still runs on `ExMLX.Backend`; it logs this once per
    function). The options are `ExMLX.Distributed`'s (`:group`, `:timeout`),
    given when the function is traced. Tensors on another backend are copied
    to `ExMLX.Backend` first.
    """

    import Nx.Defn, only: [deftransform: 2]

    @doc "The element-wise sum of `t` over the ranks (`ExMLX.Distributed.all_sum/2`)."
    deftransform(all_sum(t, opts \\ []), do: reduce(:all_sum, t, opts))

    @doc "The element-wise maximum of `t` over the ranks."
    deftransform(all_max(t, opts \\ []), do: reduce(:all_max, t, opts))

    @doc "The element-wise minimum of `t` over the ranks."
    deftransform(all_min(t, opts \\ []), do: reduce(:all_min, t, opts))

    @doc """
    Every rank's `t` concatenated along the first axis
    (`ExMLX.Distributed.all_gather/2`).
    """
    deftransform all_gather(t, opts \\ []) do
      t = Nx.to_tensor(t)
      size = group_size(opts)

      shape =
        case Nx.shape(t) do
          {} -> {size}
          dims -> put_elem(dims, 0, elem(dims, 0) * size)
        end

      Nx.runtime_call(
        Nx.template(shape, Nx.type(t)),
        t,
        [op: :all_gather] ++ opts,
        &__MODULE__.run_collective/2
      )
    end

    @doc """
    The average over the ranks of every tensor of a container
    (`ExMLX.Distributed.average_gradients/2`: batched into few collectives).
    """
    deftransform average_gradients(grads, opts \\ []) do
      Nx.runtime_call(grads, grads, opts, &__MODULE__.run_average/2)
    end

    defp reduce(op, t, opts) do
      t = Nx.to_tensor(t)
      Nx.runtime_call(t, t, [op: op] ++ opts, &__MODULE__.run_collective/2)
    end

    defp group_size(opts), do: (opts[:group] || ExMLX.Distributed.group()).size

    @doc false
    def run_collective(t, opts) do
      {op, opts} = Keyword.pop!(opts, :op)
      result = apply(ExMLX.Distributed, op, [ExMLX.Backend.from_nx(t), opts])
      ExMLX.Backend.to_nx(result)
    end

    @doc false
    def run_average(grads, opts), do: ExMLX.Distributed.average_gradients(grads, opts)
  end
end
