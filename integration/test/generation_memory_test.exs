if Code.ensure_loaded?(Bumblebee) do
  defmodule ExMLX.Integration.GenerationMemoryTest do
    # The memory a long Bumblebee generation takes under ExMLX.Compiler: the
    # tiny Llama of scripts/tiny_models.py (2 layers, 4 heads of 8 after the
    # grouped-query repeat, f32) generating 500 and 2,000 tokens after an
    # 8-token prompt, the peak above what the call starts with against the
    # size of its key/value cache, computed here from the model's shape.
    #
    # The bounds are what ExMLX holds. On a CUDA GPU, MLX's backend also
    # keeps the inputs of every op it has queued in a CUDA graph (up to 100
    # ops a graph) until the whole graph has run: with MLX's defaults about
    # 200 queued ops' buffers at once (bench/gpu/held_inputs.py). The
    # staged GPU suite runs the tests tagged `:one_op_per_graph` apart, with
    # `MLX_MAX_OPS_PER_BUFFER=1`, where MLX frees them op by op
    # (bench/gpu/README.md).
    use ExUnit.Case, async: false

    alias ExMLX.Integration

    @moduletag timeout: 600_000
    @moduletag :one_op_per_graph

    setup_all do
      Nx.global_default_backend(ExMLX.Backend)
      %{dir: Path.join(Integration.tiny_models!(), "llama")}
    end

    # the peak above the starting memory while `generate` runs to its end
    defp peak_above(generate, params, prompt) do
      # (the earlier calls' tensors released first: their releases queue
      # on the device's worker, behind which a read waits)
      :erlang.garbage_collect()
      0 = ExMLX.full(0, {:u, 8}, {}) |> ExMLX.item()
      :erlang.garbage_collect()

      {ids, report} =
        ExMLX.Memory.profile(fn ->
          %{token_ids: ids} = generate.(params, prompt)
          Nx.to_flat_list(ids)
        end)

      {ids, report.peak - report.active_before}
    end

    test "a 2,000-token generation's memory is its key/value cache's, a few times over",
         %{dir: dir} do
      {extra, cache} = extra_memory(dir, [])

      # The cache once, and the copies of its keys and values that
      # attention reads each step (the cache holds them {length, heads},
      # the products read them {heads, length}): within three caches, and
      # growing with the tokens by no more than that. (A loop that copied
      # the prompt's cache into its state instead of taking it over held
      # about 3.5.)
      assert extra[2000] <= 3 * cache.(2000)
      assert extra[2000] - extra[500] <= 3 * (cache.(2000) - cache.(500))
    end

    test "with fuse: true, the cache is held once per key/value head and read as stored",
         %{dir: dir} do
      {extra, cache} = extra_memory(dir, fuse: true)

      # The tiny Llama repeats each of its 2 key/value heads for 2 of its 4
      # query heads: on the CPU ExMLX.Compiler holds the cache heads-first
      # at 2 heads, and attention reads it as stored. The peak is the
      # prompt's pass: the cache, written in place; one layer's attention
      # scores and their softmax, 4 query heads by the 8 prompt positions by
      # the cache's length in float32 each (at this shape together as large
      # as the held cache); the keys of one layer that MLX's attention
      # copies to read them transposed (a quarter of the held cache: 2
      # layers, keys and values); and small values.
      held = fn new -> div(cache.(new), 2) end
      scores = fn new -> 2 * 4 * 8 * (8 + new) * 4 end

      for new <- [500, 2000] do
        assert extra[new] <= 1.25 * held.(new) + scores.(new) + 64 * 1024
      end

      assert extra[2000] - extra[500] <= 2.5 * (held.(2000) - held.(500))
    end

    test "with fuse: true and a one-token prompt, the peak is the held cache", %{dir: dir} do
      {extra, cache} = extra_memory(dir, [fuse: true], 1)

      # The cache at 2 key/value heads, each step writing its row in place
      # (the state's cache has no reference but the write's once the write
      # is made), the keys of one layer that MLX's attention copies to read
      # them transposed (a quarter of the held cache: 2 layers, keys and
      # values), and a step's small values. (Before each step's writes took
      # the cache over, the step held the old and the new: 2.2 held caches.)
      held = fn new -> div(cache.(new), 2) end

      for new <- [500, 2000] do
        assert extra[new] <= 1.25 * held.(new) + 64 * 1024
      end
    end

    # The peak above the start of generations of 500 and 2,000 tokens
    # compiled with `jit_opts` after a prompt of `prompt_length` tokens, and
    # the size of their key/value cache ({batch, length, heads, depth}, f32,
    # the heads repeated) by the number of new tokens, computed from the
    # model's shape.
    defp extra_memory(dir, jit_opts, prompt_length \\ 8) do
      {:ok, model} = Bumblebee.load_model({:local, dir}, spec_overrides: [max_positions: 4096])
      {:ok, config} = Bumblebee.load_generation_config({:local, dir})

      prompt = %{
        "input_ids" => Nx.tensor([Enum.take([1, 17, 42, 99, 5, 63, 7, 88], prompt_length)]),
        "attention_mask" => Nx.broadcast(1, {1, prompt_length}),
        "seed" => Nx.tensor([0])
      }

      spec = model.spec
      heads = spec.num_attention_heads
      depth = div(spec.hidden_size, heads)
      cache = fn new -> spec.num_blocks * 2 * (prompt_length + new) * heads * depth * 4 end

      extra =
        for new <- [500, 2000], into: %{} do
          # (min_length keeps the end-of-sequence token out: every step runs)
          config =
            Bumblebee.configure(config, max_new_tokens: new, min_length: prompt_length + new)

          generate =
            model.model
            |> Bumblebee.Text.Generation.build_generate(model.spec, config)
            |> Nx.Defn.jit([compiler: ExMLX.Compiler] ++ jit_opts)

          # (the first call traces and compiles)
          generate.(model.params, prompt)
          {ids, extra} = peak_above(generate, model.params, prompt)
          assert length(ids) == new

          IO.puts(
            "\n#{new} tokens after #{prompt_length}#{inspect(jit_opts)}: " <>
              "peak #{extra} bytes above the start, " <>
              "#{Float.round(extra / cache.(new), 2)}× the cache's #{cache.(new)}"
          )

          {new, extra}
        end

      {extra, cache}
    end
  end
end
