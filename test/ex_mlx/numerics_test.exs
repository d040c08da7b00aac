defmodule ExMLX.NumericsTest do
  # One numeric contract per op and device (docs/numerics.md): a float32
  # value's result has the same bits whatever the size of the tensor it is
  # in, and whether the op's input is already computed or still a graph.
  # The reference is the op applied once to a tensor of all the values; the
  # compiled and fused forms are checked with Nx (test/backend/numerics_test.exs).
  use ExUnit.Case, async: true

  alias ExMLX.NumericsCases, as: Cases

  @device :cpu

  defp tensor(binary) do
    ExMLX.from_binary(binary, {:f, 32}, {div(byte_size(binary), 4)}, device: @device)
  end

  # The same values as a graph still to be evaluated: negated twice (exact,
  # sign of zero and NaN kept).
  defp lazy(binary), do: binary |> tensor() |> ExMLX.negate() |> ExMLX.negate()

  # `op` of the inputs, as float32 bytes; nil where the op refuses float32
  # or gives another type (those are not float ops).
  defp float_result(op, inputs) do
    t = apply(ExMLX, op, inputs)
    if t.type == {:f, 32}, do: ExMLX.to_binary(t)
  rescue
    ExMLX.Error -> nil
  end

  defp check(op, references, arguments) do
    # references: the value binaries the op is applied to, in argument order
    with reference when is_binary(reference) <-
           float_result(op, Enum.map(references, &tensor/1)) do
      for size <- Cases.sizes(),
          {offset, binaries} <- Cases.placed_together(references, size),
          {name, make} <- [computed: &tensor/1, lazy: &lazy/1] do
        inputs = Enum.map(binaries, make)
        result = ExMLX.to_binary(apply(ExMLX, op, inputs))

        assert Cases.compare(result, reference, offset) == :ok,
               "#{op}#{inspect(arguments)} of #{size} #{name} values at offset #{offset}"
      end

      true
    end
  end

  test "every unary float op: a value's bits do not depend on the tensor's size or laziness" do
    values = Cases.values()
    checked = for op <- ExMLX.unary_ops(), check(op, [values], []), do: op
    # the float ops are all there (bitwise and predicate ops are not float ops)
    assert :exp in checked and :tanh in checked and :sigmoid in checked and :erf in checked
    assert length(checked) >= 30, inspect(checked)
  end

  test "every binary float op: a pair's bits do not depend on the tensor's size or laziness" do
    values = Cases.values()
    # the second operand: the same values rotated, so that specials meet others
    <<head::binary-size(13 * 4), tail::binary>> = values
    others = tail <> head
    checked = for op <- ExMLX.binary_ops(), check(op, [values, others], [:pair]), do: op
    assert :add in checked and :pow in checked and :atan2 in checked and :logaddexp in checked
    assert length(checked) >= 10, inspect(checked)
  end
end
