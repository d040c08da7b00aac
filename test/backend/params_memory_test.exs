if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.ParamsMemoryTest do
    # What a parameters container's conversions leave in memory once what
    # they were computed from is dropped: quantize_params/2's quantized
    # storage, and a type conversion's results after ExMLX.Params.eval/1.
    # (Not async: it reads the process-wide ExMLX.Memory figures.)
    use ExUnit.Case, async: false

    alias ExMLX.Quantization, as: Q
    alias ExMLX.TestHelpers

    @rows 512
    @columns 256

    # Two dense kernels of {rows, columns} float32, computed.
    defp kernels do
      for {layer, seed} <- [{"a", 3}, {"b", 5}], into: %{} do
        kernel =
          @rows
          |> Kernel.*(@columns)
          |> TestHelpers.pseudo_random(1.0, seed)
          |> Nx.tensor(type: :f32, backend: ExMLX.Backend)
          |> Nx.reshape({@rows, @columns})

        # (computed: its MLX memory is allocated now)
        _ = Nx.to_binary(kernel[0])
        {layer, %{"kernel" => kernel}}
      end
    end

    # The kernels quantized; only the quantized container comes back (the
    # kernels are garbage).
    defp quantized_kernels(opts), do: Q.quantize_params(kernels(), opts)

    # The kernels converted to `type` and computed by ExMLX.Params.eval/1,
    # or not; only the converted container comes back.
    defp converted_kernels(type, eval?) do
      converted = Nx.Defn.Composite.traverse(kernels(), &Nx.as_type(&1, type))
      if eval?, do: ExMLX.Params.eval(converted), else: converted
    end

    test "quantize_params leaves the quantized storage alone once the kernels are dropped" do
      TestHelpers.settle()
      baseline = ExMLX.Memory.stats().active
      kernel_bytes = @rows * @columns * 4

      for bits <- [4, 8] do
        quantized = quantized_kernels(bits: bits, group_size: 64)

        # Each {in, out} kernel is stored transposed, grouped along `in`:
        # `columns` rows of `rows` values, each value `bits` bits packed in
        # 32-bit words, and a float32 scale and bias per group of 64.
        stored = @columns * (div(@rows * bits, 8) + div(@rows, 64) * 2 * 4)
        assert Q.stored_bytes(quantized["a"]["kernel"]) == stored

        # (the kernels, 2 × 512 KiB, are gone; nothing else is held)
        active = TestHelpers.settle_to(baseline, 2 * stored + 64 * 1024)

        assert active - baseline <= 2 * stored + 64 * 1024,
               "#{bits} bits: #{active - baseline} bytes above the start, the quantized " <>
                 "kernels store #{2 * stored} and the unquantized ones held #{2 * kernel_bytes}"

        # still the same values: a product with the quantized kernel
        x = Nx.iota({1, @rows}, type: :f32, backend: ExMLX.Backend) |> Nx.divide(@rows)
        y = Nx.dot(x, quantized["b"]["kernel"])
        expected = Nx.dot(x, Q.dequantize(quantized["b"]["kernel"]))
        TestHelpers.assert_close(Nx.to_flat_list(y), Nx.to_flat_list(expected), 1.0e-4, "y")
      end
    end

    test "ExMLX.Params.eval leaves a conversion's results alone once the sources are dropped" do
      TestHelpers.settle()
      baseline = ExMLX.Memory.stats().active
      # the two kernels in bfloat16: half their float32 bytes
      converted_bytes = 2 * @rows * @columns * 2
      source_bytes = 2 * @rows * @columns * 4

      converted = converted_kernels(:bf16, true)
      active = TestHelpers.settle_to(baseline, converted_bytes + 64 * 1024)

      assert active - baseline <= converted_bytes + 64 * 1024,
             "#{active - baseline} bytes above the start, the converted kernels hold " <>
               "#{converted_bytes} and their float32 sources #{source_bytes}"

      # the values are the conversion's: each float32 rounded to the
      # nearest bfloat16, ties to even (the values are finite)
      x = converted["a"]["kernel"]
      assert x.type == {:bf, 16}

      expected =
        for v <- TestHelpers.pseudo_random(@rows * @columns, 1.0, 3), into: <<>> do
          <<bits::32>> = <<v::float-32>>
          rounded = Bitwise.bsr(bits + 0x7FFF + Bitwise.band(Bitwise.bsr(bits, 16), 1), 16)
          <<rounded::16-little>>
        end

      assert Nx.to_binary(x) == expected
    end

    test "without ExMLX.Params.eval a conversion holds its source until its first use" do
      TestHelpers.settle()
      baseline = ExMLX.Memory.stats().active
      source_bytes = 2 * @rows * @columns * 4

      # (lazy: the float32 kernels are held by the conversions' graphs,
      # and nothing of the bfloat16 results is allocated yet)
      converted = converted_kernels(:bf16, false)
      active = TestHelpers.settle_to(baseline, source_bytes + 64 * 1024)
      assert active - baseline >= source_bytes
      assert converted["b"]["kernel"].type == {:bf, 16}
    end
  end
end
