if Code.ensure_loaded?(Bumblebee) do
  defmodule ExMLX.Integration.QuantizationTest do
    # A Bumblebee model with its dense kernels quantized
    # (ExMLX.Quantization.quantize_model/2): the tiny Llama of
    # scripts/tiny_models.py run by Axon on ExMLX.Backend, eagerly and
    # compiled, and its greedy generation, against the same model with the
    # kernels' dequantized values.
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

      quantized = Quantization.quantize_model(model, bits: 8, group_size: 32).params
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

      # compiled: the same values, and greedy generation picks the tokens of
      # the dequantized kernels
      %{logits: compiled} = Axon.predict(model.model, quantized, inputs, compiler: ExMLX.Compiler)
      assert Nx.to_binary(compiled) == Nx.to_binary(got)

      {:ok, config} = Bumblebee.load_generation_config({:local, Path.join(dir, "llama")})
      config = Bumblebee.configure(config, max_new_tokens: 20, min_length: 8 + 20)

      generate =
        model.model
        |> Bumblebee.Text.Generation.build_generate(model.spec, config)
        |> Nx.Defn.jit(compiler: ExMLX.Compiler)

      prompt = %{
        "input_ids" => reference["input_ids"][0..0],
        "attention_mask" => reference["attention_mask"][0..0],
        "seed" => Nx.tensor([0])
      }

      # (programs other tests made stay in the cache: this test's are the new ones)
      earlier = MapSet.new(ExMLX.ProgramCache.entries(), &elem(&1, 0))
      %{token_ids: quantized_ids} = generate.(quantized, prompt)
      %{token_ids: dequantized_ids} = generate.(dequantized, prompt)

      IO.puts(
        "llama 8-bit greedy: #{inspect(Nx.to_flat_list(quantized_ids), charlists: :as_lists)}"
      )

      assert Nx.to_flat_list(quantized_ids) == Nx.to_flat_list(dequantized_ids)

      # the generation program multiplies by the packed kernels in its loop
      [ops] =
        for {{:quantized, _plain, [_ | _]} = key, {:program, %{program: p}}} <-
              ExMLX.ProgramCache.entries(),
            not MapSet.member?(earlier, key),
            {_device, _inputs, _constants, instructions, _outputs} = ExMLX.ProgramCache.spec(p),
            Enum.any?(instructions, &match?({:while, _, _, _}, &1)),
            do: op_names(instructions)

      IO.puts(
        "llama 8-bit generation program: #{ops[:quantized_matmul]} quantized_matmul, " <>
          "#{ops[:dequantize] || 0} dequantize (the embedding's lookups)"
      )

      assert ops[:quantized_matmul] >= 2 * (2 * 7 + 1)
    end

    # how many times each op appears in a program's instructions, loops and
    # branches included
    defp op_names(instructions),
      do: instructions |> Enum.flat_map(&ops_of/1) |> Enum.frequencies()

    defp ops_of({:while, _initial, {condition, _}, {body, _}}),
      do: Enum.flat_map(condition ++ body, &ops_of/1)

    defp ops_of({:cond, clauses, {last, _}}) do
      blocks = Enum.flat_map(clauses, fn {{predicate, _}, {body, _}} -> predicate ++ body end)
      Enum.flat_map(blocks ++ last, &ops_of/1)
    end

    defp ops_of(instruction), do: [elem(instruction, 0)]
  end
end
