defmodule ExMLX.NumericsCases do
  @moduledoc """
  The inputs and the comparison of the one-numeric-contract tests
  (docs/numerics.md): float32 values, special ones included, placed in
  tensors of several sizes; a result agrees when the value computed at each
  position has the bits the same value gets in the reference tensor.
  """

  @doc "The tensor sizes every op is checked at."
  def sizes, do: [1, 7, 4095, 4096, 1_048_576]

  @doc """
  The float32 values the ops are checked on, as a binary: the specials
  (zeros, infinities, NaN, the smallest subnormal and normal, the largest
  finite values, values at the functions' bends) then values drawn from a
  seeded generator over several magnitudes (so the list is the same in every
  run). `count` values in all.
  """
  def values(count \\ 64) do
    specials = [0.0, -0.0, :infinity, :neg_infinity, :nan, 1.0, -1.0, 0.5, -0.5, 2.0]

    specials =
      specials ++
        [1.0e-45, -1.0e-45, 1.1754944e-38, 3.4028235e38, -3.4028235e38, 88.5, -88.5, 1.0e-4]

    :rand.seed(:exsss, {17, 29, 41})

    drawn =
      for _ <- 1..(count - length(specials)) do
        magnitude = Enum.random([1.0e-6, 1.0e-3, 0.1, 1.0, 3.0, 10.0, 100.0])
        (:rand.uniform() * 2 - 1) * magnitude
      end

    for v <- specials ++ drawn, into: <<>>, do: f32(v)
  end

  defp f32(:nan), do: <<0x7FC00000::32-little>>
  defp f32(:infinity), do: <<0x7F800000::32-little>>
  defp f32(:neg_infinity), do: <<0xFF800000::32-little>>
  defp f32(v), do: <<v::float-32-little>>

  @doc """
  The tensors of `size` values that cover `values` (a binary of float32s)
  when `size` is smaller than their count (consecutive windows, the last
  wrapping around), or the one tensor repeating them to `size`: each as
  `{offset, binary}`, position `i` holding value `(offset + i) mod count`.
  """
  def placed(values, size) do
    count = div(byte_size(values), 4)
    repeated = :binary.copy(values, div(size + count - 1, count) + 1)

    if size >= count do
      [{0, binary_part(repeated, 0, size * 4)}]
    else
      for offset <- 0..(count - 1)//size do
        {offset, binary_part(repeated, offset * 4, size * 4)}
      end
    end
  end

  @doc """
  `placed/2` of each of `references` (binaries of float32s of one count)
  at once: `{offset, binaries}`, one binary per reference, in their order.
  """
  def placed_together(references, size) do
    references
    |> Enum.map(&placed(&1, size))
    |> Enum.zip_with(fn windows ->
      [{offset, _} | _] = windows
      {offset, Enum.map(windows, &elem(&1, 1))}
    end)
  end

  @doc """
  Whether `result` (a binary of float32s) holds at each position `i` the
  bits of `reference`'s value `(offset + i) mod count` (any NaN matching any
  NaN: payloads are unspecified); `:ok` or `{:mismatch, position, got,
  expected}` for the first that differs.
  """
  def compare(result, reference, offset) do
    expected = expected(result, reference, offset)

    if result == expected do
      :ok
    else
      first_difference(result, expected, 0)
    end
  end

  @doc """
  The largest distance, in units in the last place, between `result`'s
  value at each position and `reference`'s value `(offset + i) mod count`
  (NaN against NaN is 0, NaN against a number `:infinity`; +0 and -0 are 1
  apart).
  """
  def max_ulps(result, reference, offset) do
    expected = expected(result, reference, offset)
    if result == expected, do: 0, else: widest(result, expected, 0)
  end

  # `reference`'s values from `offset` on, repeated to `result`'s length
  defp expected(result, reference, offset) do
    count = div(byte_size(reference), 4)
    n = div(byte_size(result), 4)
    repeated = :binary.copy(reference, div(n + offset + count - 1, count) + 1)
    binary_part(repeated, offset * 4, n * 4)
  end

  defp widest(<<a::32-little, ra::binary>>, <<b::32-little, rb::binary>>, worst) do
    d =
      cond do
        a == b -> 0
        nan?(a) and nan?(b) -> 0
        nan?(a) or nan?(b) -> :infinity
        true -> abs(ordered(a) - ordered(b))
      end

    widest(ra, rb, if(d == :infinity or (worst != :infinity and d > worst), do: d, else: worst))
  end

  defp widest(<<>>, <<>>, worst), do: worst

  # float32 bits as integers in the order of their values
  defp ordered(bits) when bits >= 0x80000000, do: -(bits - 0x80000000) - 1
  defp ordered(bits), do: bits

  defp first_difference(<<a::32-little, ra::binary>>, <<b::32-little, rb::binary>>, i) do
    if a == b or (nan?(a) and nan?(b)),
      do: first_difference(ra, rb, i + 1),
      else: {:mismatch, i, hex(a), hex(b)}
  end

  defp first_difference(<<>>, <<>>, _i), do: :ok

  defp nan?(bits),
    do: Bitwise.band(bits, 0x7F800000) == 0x7F800000 and Bitwise.band(bits, 0x7FFFFF) != 0

  defp hex(bits), do: "0x" <> String.pad_leading(Integer.to_string(bits, 16), 8, "0")
end
