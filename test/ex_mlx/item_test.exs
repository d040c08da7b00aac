defmodule ExMLX.ItemTest do
  # Regression suite for the reported misread: a scalar that is still a view
  # into a larger buffer (slice -> squeeze) read with the wrong element size
  # gave 4,088,808,866,743 instead of 951. Every dtype, every kind of view.
  use ExUnit.Case, async: true

  import ExMLX.TestHelpers, only: [device_for: 1]

  @n 2000
  @types ExMLX.TestHelpers.types()

  # The value index `i` of an arange holds once converted to `type`,
  # derived here without ExMLX: integer wrap-around, exact small floats,
  # bf16 rounding (round to nearest even, 8 significant bits), complex (i, 0).
  defp expected(i, {:u, bits}), do: rem(i, Bitwise.bsl(1, bits))

  defp expected(i, {:s, bits}) do
    m = rem(i, Bitwise.bsl(1, bits))
    if m >= Bitwise.bsl(1, bits - 1), do: m - Bitwise.bsl(1, bits), else: m
  end

  defp expected(i, {:f, _}), do: i * 1.0
  defp expected(i, {:bf, 16}), do: bf16_round(i) * 1.0
  defp expected(i, {:c, 64}), do: {i * 1.0, 0.0}
  defp expected(i, :bool), do: i != 0

  defp bf16_round(i) when i < 256, do: i

  defp bf16_round(i) do
    # Keep 8 significant bits: drop `shift` low bits, rounding half to even.
    shift = bit_length(i) - 8
    unit = Bitwise.bsl(1, shift)
    low = rem(i, unit)
    base = i - low
    half = div(unit, 2)

    cond do
      low > half -> base + unit
      low < half -> base
      Bitwise.band(div(base, unit), 1) == 0 -> base
      true -> base + unit
    end
  end

  defp bit_length(i), do: length(Integer.digits(i, 2))

  defp arange(type) do
    # Built in s32 and converted, as Nx's iota does for other types.
    ExMLX.iota({:s, 32}, {@n}, device: device_for(type)) |> ExMLX.as_type(type)
  end

  @indices [0, 951, 998, @n - 1] ++ Enum.take_random(1..(@n - 2), 6)

  for type <- @types do
    describe "item of #{inspect(type)}" do
      test "a squeezed slice at an offset reads its own value" do
        type = unquote(Macro.escape(type))
        a = arange(type)

        for i <- @indices do
          scalar = a |> ExMLX.slice([i], [i + 1]) |> ExMLX.squeeze()
          assert scalar.shape == {}
          assert ExMLX.item(scalar) == expected(i, type), "index #{i}"
        end
      end

      test "an element of a transposed view" do
        type = unquote(Macro.escape(type))
        # {40, 50} transposed to {50, 40}: element (c, r) holds r * 50 + c
        t = arange(type) |> ExMLX.reshape({40, 50}) |> ExMLX.transpose()

        for {r, c} <- [{0, 0}, {19, 1}, {39, 49}, {7, 33}] do
          v = t |> ExMLX.slice([c, r], [c + 1, r + 1]) |> ExMLX.squeeze() |> ExMLX.item()
          assert v == expected(r * 50 + c, type), "(#{c}, #{r})"
        end
      end

      test "an element of a broadcast and of a strided view" do
        type = unquote(Macro.escape(type))
        b = arange(type) |> ExMLX.broadcast_to({3, @n})
        v = b |> ExMLX.slice([2, 998], [3, 999]) |> ExMLX.squeeze() |> ExMLX.item()
        assert v == expected(998, type)

        # every 7th element from 3: position 136 holds 3 + 7 * 136 = 955
        s = arange(type) |> ExMLX.slice([3], [@n], [7])
        v = s |> ExMLX.slice([136], [137]) |> ExMLX.squeeze() |> ExMLX.item()
        assert v == expected(955, type)
      end
    end
  end

  test "item of a tensor with more than one element is an error" do
    assert_raise ExMLX.Error, "tensor: item needs exactly one element, the tensor has 2", fn ->
      ExMLX.item(ExMLX.iota({:s, 32}, {2}))
    end
  end

  test "NaN and infinities come back as Nx's atoms" do
    for type <- [{:f, 16}, {:bf, 16}, {:f, 32}, {:f, 64}] do
      on = [device: device_for(type)]
      assert ExMLX.item(ExMLX.full(:nan, type, {}, on)) == :nan
      assert ExMLX.item(ExMLX.full(:infinity, type, {}, on)) == :infinity
      assert ExMLX.item(ExMLX.full(:neg_infinity, type, {}, on)) == :neg_infinity
    end

    assert ExMLX.item(ExMLX.full({:nan, :infinity}, {:c, 64}, {})) == {:nan, :infinity}
  end

  test "extreme integers are exact" do
    assert ExMLX.item(ExMLX.full(18_446_744_073_709_551_615, {:u, 64}, {})) ==
             18_446_744_073_709_551_615

    assert ExMLX.item(ExMLX.full(-9_223_372_036_854_775_808, {:s, 64}, {})) ==
             -9_223_372_036_854_775_808
  end
end
