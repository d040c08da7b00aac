if Code.ensure_loaded?(Bumblebee) do
  defmodule ExMLX.Integration.LlmGpuTest do
    # A real-size language model on the GPU: the Llama 3.2 1B shape (random
    # weights drawn by transformers from a config, scripts/llm_reference.py;
    # no hub), saved in bf16 and loaded with Bumblebee on `:gpu`, beside
    # PyTorch on CUDA with the same weights and prompt ids. Tagged `:gpu`:
    # test_helper.exs excludes it where MLX has no GPU; the staged suite
    # (bench/gpu/run.sh suite) runs it on a GPU machine.
    use ExUnit.Case, async: false

    alias ExMLX.Integration

    @moduletag :gpu
    @moduletag timeout: 1_800_000

    # the largest difference from PyTorch's logits allowed, relative to the
    # largest logit
    @tolerance 1.0e-2
    @prompt 32
    @new 32

    setup_all do
      previous = Nx.default_backend()
      Nx.global_default_backend({ExMLX.Backend, device: :gpu})
      on_exit(fn -> Nx.global_default_backend(previous) end)

      dir = Integration.data_path("llm/llama-1b-bfloat16")
      Integration.python!("llm_reference.py", ["make", dir, "llama-1b", "bfloat16"])

      reference =
        Integration.python!("llm_reference.py", [
          "greedy",
          dir,
          "cuda",
          "#{@prompt}",
          "#{@new}"
        ])
        |> String.split("\n", trim: true)
        |> Enum.find_value(fn line ->
          case Jason.decode(line) do
            {:ok, %{"runtime" => "torch"} = row} -> row
            _ -> nil
          end
        end)

      {:ok, model} =
        Bumblebee.load_model({:local, dir}, type: :bf16, backend: {ExMLX.Backend, device: :gpu})

      ids = Integration.prompt_ids(model.spec.vocab_size, @prompt)

      %{dir: dir, reference: reference, model: model, ids: ids}
    end

    test "the 1B shape's last prompt logits in bf16 are within 1e-2 of PyTorch's",
         %{reference: reference, model: model, ids: ids} do
      expected = reference["logits"] |> File.read!() |> Nx.from_binary(:f32)

      inputs = %{"input_ids" => ids, "attention_mask" => Nx.broadcast(1, ids.shape)}

      %{logits: logits} =
        Axon.predict(model.model, model.params, inputs, compiler: ExMLX.Compiler)

      assert logits.type == {:bf, 16}
      assert logits.data.device == :gpu

      got = logits[[0, -1]] |> Nx.as_type(:f32) |> Nx.backend_transfer(Nx.BinaryBackend)
      difference = got |> Nx.subtract(expected) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
      largest = expected |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()

      IO.puts(
        "\n1B shape, bf16: logits' largest difference from PyTorch's #{difference / largest}"
      )

      assert difference <= @tolerance * largest
    end

    # Where PyTorch's two largest logits at a step are more than twice the
    # tolerance apart, logits within the tolerance of PyTorch's have the same
    # largest one: the token must be PyTorch's. Where they are closer, either
    # token may come out, and once the tokens part the two runs continue
    # from different texts: the comparison ends there.
    for jit_opts <- [[], [fuse: true]] do
      test "greedy generation gives PyTorch's tokens wherever the logits' bound decides them, #{inspect(jit_opts)}",
           %{dir: dir, reference: reference, model: model, ids: ids} do
        greedy_against_pytorch(dir, reference, model, ids, unquote(jit_opts))
      end
    end

    defp greedy_against_pytorch(dir, reference, model, ids, jit_opts) do
      {:ok, generation} = Bumblebee.load_generation_config({:local, dir})

      config =
        Bumblebee.configure(generation,
          max_new_tokens: @new,
          min_length: @prompt + @new,
          pad_token_id: 0
        )

      ours = Integration.greedy_token_ids(model, config, ids, jit_opts)
      theirs = reference["tokens"]
      assert length(ours) == @new and length(theirs) == @new

      equal =
        [ours, theirs, reference["steps"]]
        |> Enum.zip()
        |> Enum.with_index()
        |> Enum.reduce_while(0, fn {{a, b, step}, i}, equal ->
          cond do
            a == b ->
              {:cont, equal + 1}

            step["gap"] > 2 * @tolerance * step["largest"] ->
              flunk(
                "step #{i}: token #{a}, PyTorch's #{b}, whose two largest logits are " <>
                  "#{step["gap"]} apart (the largest logit #{step["largest"]})"
              )

            true ->
              {:halt, equal}
          end
        end)

      IO.puts(
        "1B shape, bf16, #{inspect(jit_opts)}: #{equal} of #{@new} greedy tokens equal to PyTorch's"
      )
    end
  end
end
