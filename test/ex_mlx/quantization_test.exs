defmodule ExMLX.QuantizationTest do
  # The op table's quantize, dequantize and quantized_matmul (MLX's affine
  # quantization), against the format's definition computed here: a group
  # of `group_size` values of a row stands for `scale · q + bias`, its
  # `bits`-bit integers `q` packed into 32-bit words lowest bits first.
  use ExUnit.Case, async: true

  @bits [2, 3, 4, 5, 6, 8]
  @group_sizes [32, 64, 128]

  import ExMLX.TestHelpers, only: [pseudo_random: 3]

  # (bfloat16 values: float32 ones rounded by ExMLX.as_type)
  defp tensor(values, {:bf, 16}, shape),
    do: values |> tensor({:f, 32}, shape) |> ExMLX.as_type({:bf, 16})

  defp tensor(values, {:f, bits} = type, shape) do
    binary = for v <- values, into: <<>>, do: <<v::float-size(bits)-native>>
    ExMLX.from_binary(binary, type, shape)
  end

  # a tensor's values as floats (bfloat16 widened by its bits)
  defp floats(t) do
    bin = ExMLX.to_binary(t)

    case t.type do
      {:f, 32} -> for <<v::float-32-native <- bin>>, do: v
      {:f, 16} -> for <<v::float-16-native <- bin>>, do: v
      {:bf, 16} -> for <<b::16-native <- bin>>, do: widen_bf16(b)
    end
  end

  defp widen_bf16(b) do
    <<v::float-32>> = <<b::16, 0::16>>
    v
  end

  # the integers of one row of packed words, lowest bits first
  defp unpack(words, bits) do
    stream = for w <- Enum.reverse(words), into: <<>>, do: <<w::32>>
    size = bit_size(stream)
    count = div(size, bits)
    for i <- 0..(count - 1), do: extract(stream, size - (i + 1) * bits, bits)
  end

  defp extract(stream, offset, bits) do
    <<_::size(offset), v::size(bits), _::bitstring>> = stream
    v
  end

  test "dequantize is scale · q + bias for each group's packed integers" do
    for bits <- @bits, group_size <- [32, 64] do
      rows = 3
      columns = 2 * group_size
      per_row = div(columns * bits, 32)
      words = for i <- 1..(rows * per_row), do: rem(i * 2_654_435_761, 4_294_967_296)

      packed =
        ExMLX.from_binary(
          for(w <- words, into: <<>>, do: <<w::32-native>>),
          {:u, 32},
          {rows, per_row}
        )

      scales = tensor(pseudo_random(rows * 2, 0.5, 7), {:f, 32}, {rows, 2})
      biases = tensor(pseudo_random(rows * 2, 3.0, 11), {:f, 32}, {rows, 2})
      got = ExMLX.dequantize(packed, scales, biases, group_size: group_size, bits: bits)
      assert got.shape == {rows, columns} and got.type == {:f, 32}

      expected =
        for {row, r} <- Enum.with_index(Enum.chunk_every(words, per_row)),
            {q, i} <- Enum.with_index(unpack(row, bits)) do
          g = r * 2 + div(i, group_size)
          Enum.at(floats(scales), g) * q + Enum.at(floats(biases), g)
        end

      for {g, e} <- Enum.zip(floats(got), expected) do
        assert abs(g - e) <= 1.0e-6 * max(abs(e), 1.0), "bits #{bits}: #{g} against #{e}"
      end
    end
  end

  test "quantize gives each value its nearest point of its group's grid" do
    # a group's grid is bias + scale · q for q in 0..2^bits - 1: each value
    # comes back as the grid point round((v - bias) / scale) clamped to it
    # (ties, and near-ties in half precision, where MLX computes the step
    # in float32 before rounding it, may go either way)
    for type <- [{:f, 32}, {:f, 16}, {:bf, 16}], bits <- @bits, group_size <- @group_sizes do
      w =
        tensor(
          pseudo_random(2 * 2 * group_size, 2.0, bits * group_size),
          type,
          {2, 2 * group_size}
        )

      {packed, scales, biases} = ExMLX.quantize(w, group_size: group_size, bits: bits)
      assert packed.type == {:u, 32} and packed.shape == {2, div(2 * group_size * bits, 32)}
      assert scales.type == type and scales.shape == {2, 2} and biases.shape == {2, 2}

      back = ExMLX.dequantize(packed, scales, biases, group_size: group_size, bits: bits)
      assert back.type == type
      top = 2 ** bits - 1
      near = if type == {:f, 32}, do: 1.0e-4, else: 0.05
      # (dequantizing rounds scale · q and the sum in the scales' type)
      ulp = %{{:f, 32} => 2 ** -23, {:f, 16} => 2 ** -10, {:bf, 16} => 2 ** -7}[type]
      {scales, biases} = {floats(scales), floats(biases)}

      for {{b, v}, i} <- Enum.with_index(Enum.zip(floats(back), floats(w))) do
        {scale, bias} = {Enum.at(scales, div(i, group_size)), Enum.at(biases, div(i, group_size))}
        t = (v - bias) / scale
        nearest = t |> round() |> max(0) |> min(top)

        candidates =
          if abs(t - Float.floor(t) - 0.5) < near,
            do: [nearest - 1, nearest, nearest + 1],
            else: [nearest]

        assert Enum.any?(candidates, fn q ->
                 q in 0..top and
                   abs(b - (bias + scale * q)) <= 2 * ulp * (abs(scale * q) + abs(bias))
               end),
               "#{inspect(type)}, #{bits} bits, groups of #{group_size}: #{b} for #{v}"
      end
    end
  end

  test "values on a group's grid quantize exactly" do
    # 0..31 is 2^5 - 1 steps of 1: five bits hold it exactly
    w = tensor(Enum.map(0..63, &(rem(&1, 32) * 1.0)), {:f, 32}, {2, 32})
    {packed, scales, biases} = ExMLX.quantize(w, group_size: 32, bits: 5)
    back = ExMLX.dequantize(packed, scales, biases, group_size: 32, bits: 5)
    assert floats(back) == floats(w)
  end

  test "quantized_matmul is the product with the dequantized matrix" do
    for {bits, group_size} <- [{4, 64}, {8, 32}, {3, 128}], transpose <- [true, false] do
      {n, k} = {3, 128}
      shape = if transpose, do: {n, k}, else: {k, n}
      # (a matrix {k, n} is quantized along n: groups need n = 128 then)
      shape = if transpose, do: shape, else: {k, 128}
      w = tensor(pseudo_random(elem(shape, 0) * elem(shape, 1), 1.0, bits), {:f, 32}, shape)
      {packed, scales, biases} = ExMLX.quantize(w, group_size: group_size, bits: bits)
      dense = ExMLX.dequantize(packed, scales, biases, group_size: group_size, bits: bits)
      x = tensor(pseudo_random(2 * 2 * k, 1.0, 5), {:f, 32}, {2, 2, k})

      opts = [transpose: transpose, group_size: group_size, bits: bits]
      got = ExMLX.quantized_matmul(x, packed, scales, biases, opts)
      outputs = if transpose, do: n, else: 128
      assert got.shape == {2, 2, outputs}

      m = dense |> floats() |> Enum.chunk_every(elem(shape, 1))
      columns = if transpose, do: m, else: Enum.zip_with(m, & &1)

      expected =
        for row <- x |> floats() |> Enum.chunk_every(k), column <- columns do
          row |> Enum.zip_with(column, &(&1 * &2)) |> Enum.sum()
        end

      for {g, e} <- Enum.zip(floats(got), expected) do
        assert abs(g - e) <= 1.0e-4 * max(abs(e), 1.0),
               "#{bits} bits, transpose #{transpose}: #{g} against #{e}"
      end
    end
  end

  test "bad formats and shapes are errors that name them" do
    w = tensor(pseudo_random(64, 1.0, 3), {:f, 32}, {1, 64})

    assert_raise ExMLX.Error, "bits: quantization takes bits of [2, 3, 4, 5, 6, 8], got 7", fn ->
      ExMLX.quantize(w, group_size: 32, bits: 7)
    end

    assert_raise ExMLX.Error,
                 "group_size: quantization takes group sizes of [32, 64, 128], got 48",
                 fn -> ExMLX.quantize(w, group_size: 48, bits: 4) end

    assert_raise ExMLX.Error,
                 "tensor: quantize needs a last axis that is a multiple of the group size 128, " <>
                   "got shape {1, 64}",
                 fn -> ExMLX.quantize(w, group_size: 128, bits: 4) end

    assert_raise ExMLX.Error,
                 "tensor: quantize needs a tensor of rank 2 or more, got shape {64}",
                 fn -> ExMLX.quantize(ExMLX.reshape(w, {64}), group_size: 32, bits: 4) end

    assert_raise ExMLX.Error,
                 "tensor: quantize needs {:f, 32}, {:f, 16} or {:bf, 16}, got {:s, 32}",
                 fn -> ExMLX.quantize(ExMLX.iota({:s, 32}, {1, 64}), group_size: 32, bits: 4) end

    {packed, scales, biases} = ExMLX.quantize(w, group_size: 32, bits: 4)

    assert_raise ExMLX.Error,
                 "scales: dequantize needs scales and biases of shape {1, 2} for packed " <>
                   "values of shape {1, 8} (4 bits, groups of 32), got {1, 1} and {1, 2}",
                 fn ->
                   ExMLX.dequantize(packed, ExMLX.slice(scales, [0, 0], [1, 1], [1, 1]), biases,
                     group_size: 32,
                     bits: 4
                   )
                 end

    assert_raise ExMLX.Error,
                 "packed: dequantize needs {:u, 32} packed values, got {:f, 32}",
                 fn -> ExMLX.dequantize(w, scales, biases, group_size: 32, bits: 4) end

    assert_raise ExMLX.Error,
                 "tensor: quantized_matmul needs a last axis of 64 for a quantized matrix " <>
                   "of 1 × 64 (transpose: true), got shape {2, 32}",
                 fn ->
                   x = ExMLX.full(1.0, {:f, 32}, {2, 32})
                   ExMLX.quantized_matmul(x, packed, scales, biases, group_size: 32, bits: 4)
                 end

    assert_raise ExMLX.Error,
                 "tensor: quantized_matmul needs a tensor of the scales' type {:f, 32}, " <>
                   "got {:bf, 16}",
                 fn ->
                   x = ExMLX.full(1.0, {:bf, 16}, {2, 64})
                   ExMLX.quantized_matmul(x, packed, scales, biases, group_size: 32, bits: 4)
                 end
  end
end
