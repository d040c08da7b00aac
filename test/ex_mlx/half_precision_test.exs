defmodule ExMLX.HalfPrecisionTest do
  # Sums, products, means and scans of f16 and bf16 tensors accumulate in
  # float32 and round once to the tensor's type (ops/reduce.rs): MLX 0.32's
  # CPU kernels accumulate in the 16-bit type itself, where a sum of 10,000
  # f16 values of 0.1 came to 256.0 (bf16: 32.0) and a mean to 0.0256.
  # Expected values are computed here in Elixir floats from the elements'
  # exact values, then rounded to the type.
  use ExUnit.Case, async: true

  import Bitwise

  # x rounded to nearest (ties to even) in `type`; exact sums here are
  # representable in f32, so rounding through f32 first changes nothing
  defp round_to({:f, 16}, x) do
    <<r::float-16>> = <<x::float-16>>
    r
  end

  defp round_to({:bf, 16}, x) do
    <<bits::32>> = <<x::float-32>>
    lsb = bits >>> 16 &&& 1
    top = (bits + 0x7FFF + lsb) >>> 16
    <<r::float-32>> = <<top <<< 16::32>>
    r
  end

  # the tensor of `values` (each representable in `type`: the cast from
  # f32 is exact)
  defp tensor(values, type) do
    for(v <- values, into: <<>>, do: <<v::float-32-little>>)
    |> ExMLX.from_binary({:f, 32}, {length(values)})
    |> ExMLX.as_type(type)
  end

  defp ulp_at({:f, 16}, x), do: :math.pow(2, Float.floor(:math.log2(abs(x))) - 10)
  defp ulp_at({:bf, 16}, x), do: :math.pow(2, Float.floor(:math.log2(abs(x))) - 7)

  for type <- [{:f, 16}, {:bf, 16}] do
    @type_ type

    test "sums and means of #{inspect(type)} round the exact result once" do
      type = @type_
      tenth = round_to(type, 0.1)
      # 10,000 tenths, and a ramp of quarters: every partial sum is exact in f32
      for values <- [List.duplicate(tenth, 10_000), for(i <- 0..8191, do: rem(i, 13) * 0.25)] do
        t = tensor(values, type)
        exact = Enum.sum(values)
        assert ExMLX.sum(t) |> ExMLX.item() == round_to(type, exact)
        assert ExMLX.window_sum(t, {length(values)}) |> ExMLX.to_list() == [round_to(type, exact)]

        prefixes = Enum.scan(values, &(&1 + &2)) |> Enum.map(&round_to(type, &1))
        assert ExMLX.cumulative_sum(t) |> ExMLX.to_list() == prefixes
      end

      # 8,192 elements: the mean is the sum over a power of two, exact
      quarters = for i <- 0..8191, do: rem(i, 13) * 0.25

      assert ExMLX.mean(tensor(quarters, type)) |> ExMLX.item() ==
               round_to(type, Enum.sum(quarters) / 8192)
    end

    test "products of #{inspect(type)} are within one unit of the exact result's last place" do
      type = @type_
      # 1 + 2^-7 is exact in both types; its 1,000th power is about 2,470
      step = 1 + :math.pow(2, -7)
      values = List.duplicate(step, 1000)
      exact = :math.pow(step, 1000)
      got = ExMLX.product(tensor(values, type)) |> ExMLX.item()
      assert abs(got - exact) <= ulp_at(type, exact), "#{got} against #{exact}"
      last = ExMLX.cumulative_product(tensor(values, type)) |> ExMLX.to_list() |> List.last()
      assert abs(last - exact) <= ulp_at(type, exact), "#{last} against #{exact}"
    end
  end
end
