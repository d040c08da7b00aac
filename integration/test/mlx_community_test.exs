if Code.ensure_loaded?(Bumblebee) and Code.ensure_loaded?(ExMLX.Build) do
  defmodule ExMLX.Integration.MlxCommunityTest do
    # Quantized folders in mlx-community's layout, made by mlx-lm's
    # `convert -q` from tiny random Llama, Qwen3, Mistral and Phi-3 models
    # (scripts/mlx_community.py), loaded by ExMLX.Quantization.load_model/2
    # into Bumblebee's models: logits and greedy tokens against mlx-lm's on
    # the same folder, and the errors a bad folder gives.
    use ExUnit.Case, async: false

    alias ExMLX.Integration
    alias ExMLX.Quantization

    @moduletag timeout: 1_200_000

    setup_all do
      Nx.global_default_backend(ExMLX.Backend)
      dir = Integration.data_path("mlx-community")

      unless File.exists?(Path.join([dir, "llama-3bit", "mlx_lm_reference.safetensors"])) do
        {:ok, paths} = Integration.mlx_python_paths()
        File.mkdir_p!(dir)
        IO.puts(Integration.python!("mlx_community.py", [dir], paths))
      end

      %{dir: dir}
    end

    defp quantized_params(%Axon.ModelState{data: data}) do
      for {layer, params} <- data,
          {name, %Nx.Tensor{} = t} <- params,
          Quantization.quantized?(t),
          do: {layer, name, t}
    end

    defp relative_gap(got, expected) do
      difference = got |> Nx.subtract(expected) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
      largest = expected |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
      difference / max(largest, 1.0)
    end

    # two blocks of 7 linear layers each, the token embedding, the output
    # layer (Qwen3's is the embedding, tied: one stored tensor read both
    # ways; Phi-3's query, key and value are rows of one stored layer, its
    # gate and up projections too)
    for {name, bits} <- [
          {"llama", 4},
          {"qwen3", 4},
          {"mistral", 4},
          {"phi3", 4},
          {"llama-3bit", 3}
        ] do
      test "a #{bits}-bit #{name} folder: mlx-lm's logits and 20 greedy tokens", %{dir: dir} do
        folder = Path.join(dir, unquote(name))
        reference = Integration.read_tensors(Path.join(folder, "mlx_lm_reference.safetensors"))

        {:ok, model} = Quantization.load_model({:local, folder})
        quantized = quantized_params(model.params)
        assert length(quantized) == 2 * 7 + 2

        for {_layer, _name, t} <- quantized do
          assert Quantization.describe(t) =~ "#{unquote(bits)}-bit, groups of 32"
          assert t.type == {:f, 32}
        end

        # the kernels of dense layers are stored as the checkpoint has them
        # ({out, in}), read transposed
        {_, _, query} =
          Enum.find(quantized, fn {layer, _, _} ->
            layer == "decoder.blocks.0.self_attention.query"
          end)

        assert query.shape == {32, 32}
        assert Quantization.describe(query) =~ "stored transposed"

        inputs = %{"input_ids" => reference["input_ids"]}

        %{logits: logits} =
          Axon.predict(model.model, model.params, inputs, compiler: ExMLX.Compiler)

        expected = Nx.backend_copy(reference["logits"], ExMLX.Backend)
        gap = relative_gap(logits[0], expected)
        IO.puts("\n#{unquote(name)}: logits' largest difference from mlx-lm's #{gap}")
        assert gap <= 1.0e-3

        # eagerly: the same values as compiled
        %{logits: eager} = Axon.predict(model.model, model.params, inputs)
        assert relative_gap(eager, logits) <= 1.0e-6

        {:ok, config} = Bumblebee.load_generation_config({:local, folder})

        config = Bumblebee.configure(config, max_new_tokens: 20)
        ids = Integration.greedy_token_ids(model, config, reference["input_ids"])
        IO.puts("#{unquote(name)} greedy: #{inspect(ids, charlists: :as_lists)}")

        assert ids == Nx.to_flat_list(reference["generated"])
      end
    end

    test ":type other than the scales' converts the scales and biases, not the packed values",
         %{dir: dir} do
      folder = Path.join(dir, "llama")
      {:ok, f32} = Quantization.load_model({:local, folder})
      {:ok, bf16} = Quantization.load_model({:local, folder}, type: :bf16)

      stored = fn model, layer ->
        %Nx.Tensor{data: %ExMLX.Backend{quantization: q}} = model.params.data[layer]["kernel"]
        q
      end

      for layer <- ["decoder.blocks.1.ffn.output", "embedder.token_embedding"] do
        assert bf16.params.data[layer]["kernel"].type == {:bf, 16}
        {a, b} = {stored.(f32, layer), stored.(bf16, layer)}
        assert ExMLX.to_binary(b.packed) == ExMLX.to_binary(a.packed)

        for part <- [:scales, :biases] do
          expected = a |> Map.fetch!(part) |> ExMLX.as_type({:bf, 16}) |> ExMLX.to_binary()
          assert ExMLX.to_binary(Map.fetch!(b, part)) == expected
        end
      end

      # the plain parameters converted by Bumblebee
      assert bf16.params.data["output_norm"]["weight"].type == {:bf, 16}
    end

    # a copy of the Llama folder, changed by `change` (a function of the
    # copy's path)
    defp bad_folder(dir, tmp, change) do
      copy = Path.join(tmp, "llama")
      File.rm_rf!(copy)
      File.cp_r!(Path.join(dir, "llama"), copy)
      change.(copy)
      copy
    end

    defp edit_config(folder, fun) do
      path = Path.join(folder, "config.json")
      config = path |> File.read!() |> Jason.decode!()
      File.write!(path, Jason.encode!(fun.(config)))
    end

    defp edit_tensors(folder, fun) do
      path = Path.join(folder, "model.safetensors")
      {:ok, tensors} = ExMLX.Wire.read_bundle(path)
      File.rm!(Path.join(folder, "model.safetensors.index.json"))
      :ok = ExMLX.Wire.write_bundle(path, fun.(tensors))
    end

    # the error, raised before any tensor is made: the memory MLX holds
    # never rises during the call (the edits' tensors released first: their
    # releases queue on the device's worker, behind which a read waits)
    defp assert_load_error(folder, message) do
      :erlang.garbage_collect()
      0 = ExMLX.full(0, {:u, 8}, {}) |> ExMLX.item()

      {error, report} =
        ExMLX.Memory.profile(fn ->
          assert_raise ArgumentError, fn -> Quantization.load_model({:local, folder}) end
        end)

      assert Exception.message(error) == message
      assert report.peak <= report.active_before
      assert report.active_after <= report.active_before
    end

    @tag :tmp_dir
    test "a bad folder: an error naming the tensor, nothing loaded", %{dir: dir, tmp_dir: tmp} do
      layer = "model.layers.0.mlp.up_proj"

      missing =
        bad_folder(dir, tmp, fn f -> edit_tensors(f, &Map.delete(&1, "#{layer}.scales")) end)

      assert_load_error(
        missing,
        "#{layer}.weight is packed (uint32), but #{layer}.scales is missing"
      )

      # config.json's format changed. (lm_head: the first quantized layer by
      # name; 128 × 32, 4 words a row. At 8 bits those 4 words hold 16
      # values, whose scales would be 1 a row in groups of 16 — which MLX
      # does not have; in groups of 32, half a group.)
      for {key, value, message} <- [
            {"group_size", 64,
             "lm_head.weight: its 32 4-bit values per row are not whole groups of 64 " <>
               "(config.json's group_size: 64)"},
            {"bits", 3,
             "lm_head.weight: 4 packed 32-bit words per row do not hold a whole number of " <>
               "3-bit values (config.json's bits: 3)"},
            {"bits", 8,
             "lm_head.weight: its 16 8-bit values per row are not whole groups of 32 " <>
               "(config.json's group_size: 32)"}
          ] do
        folder =
          bad_folder(dir, tmp, fn f ->
            edit_config(f, &put_in(&1, ["quantization", key], value))
          end)

        assert_load_error(folder, message)
      end

      orphan =
        bad_folder(dir, tmp, fn f ->
          edit_tensors(f, &Map.delete(&1, "#{layer}.weight"))
        end)

      assert_load_error(
        orphan,
        "#{layer}.biases: no packed (uint32) #{layer}.weight to go with it"
      )

      plain =
        bad_folder(dir, tmp, fn f ->
          edit_config(f, &(&1 |> Map.delete("quantization") |> Map.delete("quantization_config")))
        end)

      assert_load_error(
        plain,
        "config.json has no \"quantization\" entry: not a quantized folder " <>
          "(Bumblebee.load_model/2 loads plain ones)"
      )

      # a quantized layer the model has no parameter for: found after loading,
      # and nothing is returned
      extra =
        bad_folder(dir, tmp, fn f ->
          edit_tensors(f, fn tensors ->
            Map.merge(
              tensors,
              for part <- ~w(weight scales biases), into: %{} do
                {"model.layers.7.mlp.up_proj.#{part}", tensors["#{layer}.#{part}"]}
              end
            )
          end)
        end)

      error = assert_raise ArgumentError, fn -> Quantization.load_model({:local, extra}) end

      assert Exception.message(error) ==
               "quantized layers the model built from config.json has no parameter for: " <>
                 "model.layers.7.mlp.up_proj"

      assert_raise ArgumentError, ~r/expected \{:local, folder\}/, fn ->
        Quantization.load_model({:hf, "mlx-community/any"})
      end
    end
  end
end
