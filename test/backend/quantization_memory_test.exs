if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.QuantizationMemoryTest do
    # What quantizing a parameters container leaves in memory: the
    # quantized storage alone once the unquantized kernels are dropped.
    # (Not async: it reads the process-wide ExMLX.Memory figures.)
    use ExUnit.Case, async: false

    alias ExMLX.Quantization, as: Q
    alias ExMLX.TestHelpers

    @rows 512
    @columns 256

    # Two dense kernels of {rows, columns} float32, computed, quantized;
    # only the quantized container comes back (the kernels are garbage).
    defp quantized_kernels(opts) do
      params =
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

      Q.quantize_params(params, opts)
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
  end
end
