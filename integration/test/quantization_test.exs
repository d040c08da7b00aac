if Code.ensure_loaded?(Bumblebee) do
  defmodule ExMLX.Integration.QuantizationTest do
    # A Bumblebee model with its dense kernels quantized
    # (ExMLX.Quantization.quantize_params/2): the tiny Llama of
    # scripts/tiny_models.py run by Axon on ExMLX.Backend, against the same
    # model with the kernels' dequantized values.
    use ExUnit.Case, async: false

    alias ExMLX.Integration
    alias ExMLX.Quantization

    @moduletag timeout: 1_200_000

    setup_all do
      Nx.global_default_backend(ExMLX.Backend)
      %{dir: Integration.tiny_models!()}
    end

    defp kernels(%Axon.ModelState{data: data}) do
      for {layer, %{"kernel" => t}} <- data, do: {layer, t}
    end

    test "llama with 8-bit kernels: the logits of its dequantized kernels", %{dir: dir} do
      {:ok, model} = Bumblebee.load_model({:local, Path.join(dir, "llama")})
      reference = Integration.read_tensors(Path.join([dir, "llama", "reference.safetensors"]))

      inputs = %{
        "input_ids" => reference["input_ids"],
        "attention_mask" => reference["attention_mask"]
      }

      quantized = Quantization.quantize_params(model.params, bits: 8, group_size: 32)
      kernels = kernels(quantized)
      # every attention and MLP kernel of both blocks, and the output layer
      assert Enum.count(kernels, fn {_, t} -> Quantization.quantized?(t) end) >= 2 * 7 + 1

      dequantized =
        update_in(quantized.data, fn data ->
          Map.new(data, fn {layer, params} ->
            {layer, Map.new(params, fn {name, t} -> {name, Quantization.dequantize(t)} end)}
          end)
        end)

      run = fn params ->
        %{logits: logits} =
          Axon.predict(model.model, params, inputs, compiler: Nx.Defn.Evaluator)

        logits
      end

      got = run.(quantized)
      expected = run.(dequantized)
      assert got.shape == reference["logits"].shape

      difference = got |> Nx.subtract(expected) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
      largest = expected |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
      IO.puts("\nllama 8-bit: max |quantized - dequantized| = #{difference} (largest #{largest})")
      assert difference <= 1.0e-5 * max(largest, 1.0)

      # and near the unquantized model's (PyTorch's), by 8-bit rounding of the weights
      torch = reference["logits"] |> Nx.backend_copy(ExMLX.Backend)
      off = got |> Nx.subtract(torch) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
      IO.puts("llama 8-bit: max |quantized - PyTorch f32| = #{off}")
      assert off <= 0.05 * max(largest, 1.0)

      assert_raise ArgumentError, ~r/^ExMLX.Compiler does not take quantized tensors/, fn ->
        Axon.predict(model.model, quantized, inputs, compiler: ExMLX.Compiler)
      end
    end
  end
end
