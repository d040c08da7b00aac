if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Params do
    @moduledoc """
    Functions on containers of model parameters: an `Axon.ModelState`,
    Bumblebee's parameters, or any Nx container of tensors.
    """

    alias Nx.Defn.Composite

    @doc """
    Computes every tensor of `params` on `ExMLX.Backend` now and returns
    `params`, as `ExMLX.eval/1` computes one tensor (and mlx-lm evaluates
    its model's parameters once loaded).

    MLX's operations are lazy: a parameter converted after loading (the
    float32 weights of a checkpoint loaded with `Bumblebee.load_model/2`'s
    `type: :bf16`, say) holds what it is computed from until its first use,
    and that first use then holds both. Computed, the sources are freed
    once nothing else holds them. Quantized tensors (`ExMLX.Quantization`)
    have their stored values computed; tensors of other backends are left
    as they are.

        iex> params = %{"dense" => %{"kernel" => Nx.iota({2, 2}, type: :f32, backend: ExMLX.Backend) |> Nx.as_type(:bf16)}}
        iex> ExMLX.Params.eval(params) == params
        true
    """
    @spec eval(container) :: container when container: Nx.Container.t()
    def eval(params) do
      for %Nx.Tensor{data: %ExMLX.Backend{} = data} = t <- Composite.flatten_list([params]),
          stored <- stored(t, data),
          do: ExMLX.eval(stored)

      params
    end

    defp stored(_t, %ExMLX.Backend{quantization: %ExMLX.Quantization{} = q}),
      do: [q.packed, q.scales, q.biases]

    defp stored(t, _data), do: [ExMLX.Backend.from_nx(t)]

    @doc """
    `params` with its tensors of equal values made one tensor: where two or
    more leaves have the same shape, type and bits, on the same backend and
    device, every one of them is replaced by the first in the container's
    order, so that one buffer holds them all.

    A model with tied weights loaded from a checkpoint that stores them
    once often has them twice in memory: Bumblebee's loader reads a
    checkpoint tensor anew for each parameter that names it (a Llama with
    `tie_word_embeddings` gets its embedding table and its output layer's
    kernel as two tensors of the same `{vocabulary, hidden}` values). The
    replaced tensors are freed once nothing else holds them (the container
    given, say). docs/decisions/0016-tied-weights-shared-on-request.md says
    why this is a call and not something the backend does by itself.

    Options:

      * `:min_bytes` - only tensors of at least this many bytes are
        compared (default 1 MiB): small ones cost more to compare than they
        hold.

    Values are compared bit for bit (`-0.0` and `0.0` differ; a NaN equals
    a NaN of the same bits); complex and quantized tensors
    (`ExMLX.Quantization`) and vectorized ones are left as they are. Each
    candidate is first told apart by a few of its elements; tensors that
    agree there are compared whole, on their device.

        iex> table = Nx.iota({4, 3}, type: :f32, backend: ExMLX.Backend)
        iex> params = %{
        ...>   "embedding" => %{"kernel" => table},
        ...>   "head" => %{"kernel" => Nx.add(table, 0)},
        ...>   "other" => %{"kernel" => Nx.add(table, 1)}
        ...> }
        iex> shared = ExMLX.Params.share_equal(params, min_bytes: 0)
        iex> shared["head"]["kernel"] == shared["embedding"]["kernel"]
        true
        iex> shared["other"]["kernel"] == shared["embedding"]["kernel"]
        false
    """
    @spec share_equal(container, keyword()) :: container when container: Nx.Container.t()
    def share_equal(params, opts \\ []) do
      opts = Keyword.validate!(opts, min_bytes: 1_048_576)
      min_bytes = opts[:min_bytes]

      unless is_integer(min_bytes) and min_bytes >= 0,
        do:
          raise(
            ArgumentError,
            ":min_bytes must be a non-negative integer, got: #{inspect(min_bytes)}"
          )

      # each candidate's stand-in: the first earlier tensor of its bits
      {_, replacements} =
        [params]
        |> Composite.flatten_list()
        |> Enum.filter(&candidate?(&1, min_bytes))
        |> Enum.reduce({%{}, %{}}, fn t, {seen, replacements} ->
          key = {t.shape, t.type, t.names, place(t), probe(t)}
          earlier = Map.get(seen, key, [])

          case Enum.find(earlier, &(&1 == t or equal_bits?(&1, t))) do
            nil -> {Map.put(seen, key, [t | earlier]), replacements}
            same when same == t -> {seen, replacements}
            first -> {seen, Map.put(replacements, t, first)}
          end
        end)

      if replacements == %{},
        do: params,
        else: Composite.traverse(params, &Map.get(replacements, &1, &1))
    end

    defp candidate?(%Nx.Tensor{type: {:c, _}}, _min_bytes), do: false
    defp candidate?(%Nx.Tensor{vectorized_axes: [_ | _]}, _min_bytes), do: false

    defp candidate?(%Nx.Tensor{} = t, min_bytes),
      do: not ExMLX.Quantization.quantized?(t) and Nx.byte_size(t) >= min_bytes

    defp candidate?(_other, _min_bytes), do: false

    # Where a tensor lives: only tensors of one backend and device are made
    # one (sharing must not move a parameter).
    defp place(%Nx.Tensor{data: %ExMLX.Backend{device: device}}), do: {ExMLX.Backend, device}
    defp place(%Nx.Tensor{data: %backend{}}), do: backend

    # A few elements of the tensor, as bytes: the blocks of at most 4
    # along each axis at its start, its middle and its end (slices and
    # copies only: MLX's CUDA gather would build a kernel at its first
    # use). Equal tensors have equal probes; unequal ones mostly differ
    # there already.
    defp probe(%Nx.Tensor{shape: {}} = t), do: Nx.to_binary(t)

    defp probe(%Nx.Tensor{shape: shape} = t) do
      dims = Tuple.to_list(shape)

      if Enum.any?(dims, &(&1 == 0)) do
        <<>>
      else
        lengths = Enum.map(dims, &min(&1, 4))
        ends = Enum.zip_with(dims, lengths, &(&1 - &2))
        middles = Enum.zip_with(dims, ends, &min(div(&1, 2), &2))

        [List.duplicate(0, length(dims)), middles, ends]
        |> Enum.map(&(t |> Nx.slice(&1, lengths) |> Nx.flatten()))
        |> Nx.concatenate()
        |> Nx.to_binary()
      end
    end

    defp equal_bits?(a, b) do
      [a, b]
      |> Enum.map(&as_bits/1)
      |> then(fn [a, b] -> Nx.equal(a, b) |> Nx.all() |> Nx.to_number() == 1 end)
    end

    # floats as unsigned integers of their width, so that equality is of bits
    defp as_bits(%Nx.Tensor{type: {kind, bits}} = t) when kind in [:f, :bf],
      do: Nx.bitcast(t, {:u, bits})

    defp as_bits(t), do: t
  end
end
