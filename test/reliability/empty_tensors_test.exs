defmodule ExMLX.Reliability.EmptyTensorsTest do
  # Every op of the op table on tensors with no elements, of several types and
  # shapes (the empty axis first, last, inside), with plain values for the
  # parameters it needs: each call gives tensors that can be read, or an
  # ExMLX.Error or ArgumentError; the VM lives on. MLX 0.32 divides by an
  # axis's size in its scans and sorts: a cumulative sum or a sort along an
  # axis of size 0 ended the VM (SIGFPE) before ExMLX handled such tensors
  # itself (ops/cumulative.rs, ops/sort.rs); so did a convolution with no
  # input channels and `lu`, `inv`, `tri_inv` and `solve` of 0 × 0 matrices
  # (ops/conv.rs, ops/linalg.rs). On the GPU machine, where MLX's CUDA build
  # computes CPU products with the reference BLAS, a convolution over an
  # empty window ended the VM ("On entry to SGEMM parameter number 8 had an
  # illegal value": that BLAS stops the process).
  use ExUnit.Case, async: false
  @moduletag :reliability

  @shapes [{0}, {0, 3}, {3, 0}, {0, 0}, {2, 0, 3}, {2, 3, 0}, {2, 0, 0}]
  @types [{:f, 32}, {:s, 32}, {:u, 8}, :bool, {:c, 64}]

  # A plain value of each parameter kind (ExMLX.OpTable), `k` for integers.
  defp value(kind, shape, k) do
    case kind do
      kind when kind in [:Int, :OptInt] -> k
      :Ints -> List.duplicate(k, tuple_size(shape))
      :Shape -> shape
      :Type -> {:f, 32}
      :Float -> 1.0
      :Scalar -> 0
      :Bool -> false
      :Device -> :cpu
      :Direction -> :asc
      :Str -> "x"
      :PadConfig -> List.duplicate({0, 0, 0}, tuple_size(shape))
      _optional -> nil
    end
  end

  # The results as {shape, type, bytes read}, or {:raised, error}.
  defp outcome(fun) do
    case fun.() do
      %ExMLX.Tensor{} = t -> [t]
      many when is_tuple(many) -> Tuple.to_list(many)
    end
    |> Enum.map(&{&1.shape, &1.type, ExMLX.to_binary(&1)})
  rescue
    e in [ExMLX.Error, ArgumentError] -> {:raised, e}
  end

  defp bytes_per_element(:bool), do: 1
  defp bytes_per_element({_kind, bits}), do: div(bits, 8)

  test "every op of the table on tensors with no elements gives tensors or an error" do
    entries = for e <- ExMLX.OpTable.entries(), :nx not in e.flags, :custom not in e.flags, do: e

    assert length(entries) > 100

    results =
      for e <- entries, shape <- @shapes, type <- @types, k <- [0, -1] do
        x = ExMLX.from_binary(<<>>, type, shape, device: :cpu)

        inputs =
          case e.inputs do
            {:list, _} -> [[x, x]]
            names -> Enum.map(names, fn _ -> x end)
          end

        required = for p <- e.params, p.default == nil, do: value(p.kind, shape, k)

        case outcome(fn -> apply(ExMLX, e.name, inputs ++ required) end) do
          {:raised, _} ->
            :raised

          results ->
            # every result reads as many bytes as its shape and type say
            for {out_shape, out_type, bytes} <- results do
              assert byte_size(bytes) == Tuple.product(out_shape) * bytes_per_element(out_type),
                     inspect({e.name, shape, type, out_shape, out_type})
            end

            :tensors
        end
      end

    # most calls are valid
    assert Enum.count(results, &(&1 == :tensors)) > div(length(results), 2)
    # the VM and its workers still work
    assert ExMLX.iota({:s, 32}, {4}) |> ExMLX.sum() |> ExMLX.item() == 6
  end
end
