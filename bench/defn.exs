# defn programs for bench/suite.exs: each program through ExMLX.Compiler and
# through Nx.Defn.Evaluator on ExMLX.Backend, beside the same program in
# Python mlx, plain and with mx.compile (bench/defn_reference.py), in one run.
# Needs Nx (NX_PATH); suite.exs skips the section otherwise.

if Code.ensure_loaded?(Nx) do
  defmodule Bench.Defn.Programs do
    @moduledoc false
    import Nx.Defn

    # MLP 784-512-512-10 (ReLU), as defn_reference.py's `mlp`
    defn mlp({w1, b1, w2, b2, w3, b3}, x) do
      x |> dense_relu(w1, b1) |> dense_relu(w2, b2) |> Nx.dot(w3) |> Nx.add(b3)
    end

    defnp(dense_relu(x, w, b), do: x |> Nx.dot(w) |> Nx.add(b) |> Nx.max(0))

    defn loss(params, x, labels) do
      logits = mlp(params, x)
      shifted = logits - Nx.reduce_max(logits, axes: [1], keep_axes: true)
      log_probs = shifted - Nx.log(Nx.sum(Nx.exp(shifted), axes: [1], keep_axes: true))
      -Nx.mean(Nx.sum(log_probs * labels, axes: [1]))
    end

    # one SGD step (learning rate 0.1): the loss and the new parameters
    defn train_step(params, x, labels) do
      {loss, grads} = value_and_grad(params, &loss(&1, x, labels))
      {w1, b1, w2, b2, w3, b3} = params
      {g1, gb1, g2, gb2, g3, gb3} = grads

      {loss,
       {w1 - 0.1 * g1, b1 - 0.1 * gb1, w2 - 0.1 * g2, b2 - 0.1 * gb2, w3 - 0.1 * g3,
        b3 - 0.1 * gb3}}
    end

    # 1,000 small updates of a 16-element state
    defn small_loop(x) do
      {_, x} = while({i = 0, x}, i < 1000, do: {i + 1, x * 0.999 + 0.001})
      x
    end

    # 20 element-wise ops over x
    defn chain20(x) do
      x
      |> step()
      |> step()
      |> step()
      |> step()
      |> step()
    end

    defnp(step(y), do: Nx.tanh(y * 1.1 + 0.1) * 0.9 - 0.01)

    # one pre-norm transformer block: 4-head attention and a 4× GELU MLP
    defn block(x, {wq, wk, wv, wo, w1, w2}) do
      h = layer_norm(x)
      {seq, width} = Nx.shape(x)

      heads = fn t ->
        t |> Nx.reshape({seq, 4, div(width, 4)}) |> Nx.transpose(axes: [1, 0, 2])
      end

      q = heads.(Nx.dot(h, wq))
      k = heads.(Nx.dot(h, wk))
      v = heads.(Nx.dot(h, wv))
      scores = Nx.dot(q, [2], [0], k, [2], [0]) / Nx.sqrt(div(width, 4))
      scores = scores - Nx.reduce_max(scores, axes: [2], keep_axes: true)
      weights = Nx.exp(scores) / Nx.sum(Nx.exp(scores), axes: [2], keep_axes: true)
      attended = Nx.dot(weights, [2], [0], v, [1], [0])
      attended = attended |> Nx.transpose(axes: [1, 0, 2]) |> Nx.reshape({seq, width})
      x = x + Nx.dot(attended, wo)
      u = Nx.dot(layer_norm(x), w1)
      x + Nx.dot(u * Nx.sigmoid(1.702 * u), w2)
    end

    defnp layer_norm(x) do
      mean = Nx.mean(x, axes: [1], keep_axes: true)
      centered = x - mean
      centered * Nx.rsqrt(Nx.mean(centered * centered, axes: [1], keep_axes: true) + 1.0e-5)
    end

    # 3,001 rows of 400 written one per step into a preallocated buffer
    defn rows(buffer) do
      {_, buffer} =
        while {i = 0, buffer}, i < 3001 do
          row = Nx.broadcast(Nx.as_type(i, :f32), {1, 400})
          {i + 1, Nx.put_slice(buffer, [i, 0], row)}
        end

      buffer
    end

    defn(uniform(key, opts \\ []), do: Nx.Random.uniform(key, shape: opts[:shape]))

    # the sum of a map's tensors: a call with as many arguments as a
    # language model's parameters (a plain function, as Axon's are jitted)
    def sum_all(params), do: params |> Map.values() |> Enum.reduce(&Nx.add/2)
  end

  defmodule Bench.Defn do
    @moduledoc false
    alias Bench.Defn.Programs

    # Each program runs for @warm_up_ms (at least once) before it is timed,
    # as defn_reference.py's do. The first tens of milliseconds of matrix
    # products in a VM can run at half speed for a while (bench/README.md,
    # "How defn rows are timed"): a row timed in them measured that phase,
    # not the program.
    @warm_up_ms 200

    # Rows: per program, µs per call (result read) through ExMLX.Compiler
    # and Nx.Defn.Evaluator (ExMLX.Backend), Python mlx plain and compiled.
    #
    # `py` is the Python reference: a map of seconds per call, as
    # defn_reference.py prints it (measured before this section), or a
    # function `(name, variant, reps, warm_up_ms) -> seconds | nil` that
    # times a program on request (defn_reference.py --serve). With a
    # function, each row is timed in `rounds:` alternating rounds (default
    # 1) — half of Python plain's calls, ExMLX.Compiler, the other half,
    # then Python compiled and the Evaluator — so that every ratio compares
    # measurements seconds apart, and ExMLX.Compiler's with Python plain's
    # taken on either side of it (their mean): this host's speed drifts by a
    # third within a minute.
    # Each column is the median of its per-round medians and each ratio the
    # median of the per-round ratios.
    #
    # `random: false` leaves out the Nx.Random rows (their BinaryBackend
    # reference takes seconds a call: bench/gpu/defn.exs).
    def section(reps, quick, py, timed, opts \\ []) do
      cases = cases(quick)
      warm_ms = if quick, do: 0, else: @warm_up_ms

      {py_time, rounds} =
        if is_function(py, 4),
          do: {py, Keyword.get(opts, :rounds, 1)},
          else: {fn name, variant, _reps, _warm_ms -> get_in(py, [name, variant]) end, 1}

      rows =
        for {name, label, fun, args, evaluator_reps, opts} <- Enum.map(cases, &with_opts/1) do
          args = Enum.map(args, &on_mlx/1)
          compiled = Nx.Defn.jit(fun, [compiler: ExMLX.Compiler] ++ opts)
          evaluated = Nx.Defn.jit(fun, compiler: Nx.Defn.Evaluator)
          call = fn f -> fn -> f |> apply(args) |> read() end end

          per_round =
            for _ <- 1..rounds do
              # ExMLX.Compiler timed between two halves of Python's plain
              # timing: a drift of the host's speed weighs on both alike.
              # Each side warms up right before it is timed: a call made
              # after the VM did other work is slow for a while.
              half = div(reps + 1, 2)
              plain_before = py_time.(name, "plain", half, warm_ms)
              unless quick, do: warm_up(call.(compiled), @warm_up_ms)
              c = timed.(call.(compiled), reps).median
              plain = mean(plain_before, py_time.(name, "plain", half, warm_ms))
              mxc = py_time.(name, "compiled", reps, warm_ms)

              e =
                if evaluator_reps > 0 do
                  Nx.with_default_backend(ExMLX.Backend, fn ->
                    unless quick, do: warm_up(call.(evaluated), @warm_up_ms)
                    timed.(call.(evaluated), evaluator_reps).median
                  end)
                end

              %{compiled: c, evaluator: e, plain: plain, mx_compile: mxc}
            end

          column = fn key -> per_round |> Enum.map(& &1[key]) |> median() end

          ratio_of = fn top, bottom ->
            per_round
            |> Enum.reject(&(is_nil(&1[top]) or is_nil(&1[bottom])))
            |> Enum.map(&(&1[top] / &1[bottom]))
            |> median()
          end

          [
            label,
            us(column.(:compiled)),
            us(column.(:evaluator)),
            us(column.(:plain)),
            us(column.(:mx_compile)),
            ratio(ratio_of.(:compiled, :plain)),
            ratio(ratio_of.(:evaluator, :compiled))
          ]
        end

      %{
        title:
          "defn programs, µs per call (result read): ExMLX.Compiler, Nx.Defn.Evaluator on " <>
            "ExMLX.Backend, Python mlx plain and with mx.compile" <>
            if(rounds > 1, do: " (median over #{rounds} alternating rounds)", else: ""),
        columns: [
          "ExMLX.Compiler",
          "Evaluator",
          "Python mlx",
          "mx.compile",
          "Compiler / Python",
          "Evaluator / Compiler"
        ],
        rows:
          rows ++ if(Keyword.get(opts, :random, true), do: random_rows(reps, timed), else: []),
        notes:
          "Same programs in bench/defn_reference.py. `fuse: true` on the CPU runs each group of " <>
            "element-wise float32 ops as one pass (ExMLX's own, ex_mlx_core::elementwise_fusion); " <>
            "on a GPU it runs the program through MLX's compile, as mx.compile does."
      }
    end

    @doc false
    # Calls `fun` for `ms` milliseconds (at least once).
    def warm_up(fun, ms) do
      until = System.monotonic_time(:millisecond) + ms
      fun.()
      warm_more(fun, until)
    end

    defp warm_more(fun, until) do
      if System.monotonic_time(:millisecond) < until do
        fun.()
        warm_more(fun, until)
      end
    end

    defp with_opts({_, _, _, _, _, _} = c), do: c
    defp with_opts({name, label, fun, args, reps}), do: {name, label, fun, args, reps, []}

    defp cases(quick) do
      key = Nx.Random.key(7)
      {params, key} = params(key, [{784, 512}, {512, 512}, {512, 10}])
      {x64, key} = Nx.Random.uniform(key, shape: {64, 784})
      labels = Nx.equal(Nx.iota({64, 10}, axis: 1), Nx.remainder(Nx.iota({64, 1}), 10))
      labels = Nx.as_type(labels, :f32)
      x1 = Nx.slice(x64, [0, 0], [1, 784])
      {chain_x, key} = Nx.Random.uniform(key, shape: {if(quick, do: 65_536, else: 1_048_576)})
      {block_x, key} = Nx.Random.normal(key, 0.0, 1.0, shape: {128, 256})

      {block_w, _key} =
        weights(key, [{256, 256}, {256, 256}, {256, 256}, {256, 256}, {256, 1024}, {1024, 256}])

      bf16 = fn t -> Nx.Defn.Composite.traverse(t, &Nx.as_type(&1, :bf16)) end
      few = if quick, do: 2, else: 5

      [
        {"mlp_b1", "MLP 784-512-512-10 forward, batch 1", &Programs.mlp/2, [params, x1], 15},
        {"mlp_b64", "MLP forward, batch 64", &Programs.mlp/2, [params, x64], 15},
        {"train_b64", "MLP training step (value_and_grad + SGD), batch 64",
         &Programs.train_step/3, [params, x64, labels], few},
        {"loop_1000", "while loop, 1,000 small updates", &Programs.small_loop/1,
         [Nx.iota({16}, type: :f32)], few},
        {"chain20", "20-op element-wise chain, #{Nx.size(chain_x)} f32", &Programs.chain20/1,
         [chain_x], few},
        {"chain20", "the same chain, fuse: true", &Programs.chain20/1, [chain_x], 0,
         [fuse: true]},
        {"block_f32", "transformer block (seq 128, width 256), f32", &Programs.block/2,
         [block_x, block_w], few},
        {"block_f32", "the same block, fuse: true", &Programs.block/2, [block_x, block_w], 0,
         [fuse: true]},
        {"block_bf16", "transformer block, bf16", &Programs.block/2,
         [bf16.(block_x), bf16.(block_w)], few},
        {"rows_3001", "while loop writing 3,001 rows of 400 f32", &Programs.rows/1,
         [Nx.broadcast(0.0, {3001, 400})], 2},
        {"args_300", "300 arguments of one f32 summed", &Programs.sum_all/1,
         [Map.new(1..300, &{"p#{&1}", Nx.tensor([&1 * 1.0])})], few}
      ]
    end

    # Nx.Random.uniform with ExMLX.Compiler as the compiler beside
    # Nx.BinaryBackend's Evaluator (as Axon's initializers call it).
    defp random_rows(reps, timed) do
      for shape <- [{4}, {1_000_000}] do
        fun = &Programs.uniform(&1, shape: shape)
        compiled = Nx.Defn.jit(fun, compiler: ExMLX.Compiler)
        on_binary = Nx.Defn.jit(fun, compiler: Nx.Defn.Evaluator)
        key = on_mlx(Nx.Random.key(3))
        binary_key = Nx.backend_copy(key, Nx.BinaryBackend)
        c = timed.(fn -> compiled.(key) |> read() end, reps).median

        b =
          Nx.with_default_backend(Nx.BinaryBackend, fn ->
            n = if shape == {4}, do: reps, else: 2
            timed.(fn -> on_binary.(binary_key) |> read() end, n).median
          end)

        [
          "Nx.Random.uniform #{inspect(shape)}: ExMLX.Compiler; 'Evaluator' column = Nx.BinaryBackend",
          us(c),
          us(b),
          "—",
          "—",
          "—",
          ratio(b, c)
        ]
      end
    end

    defp params(key, shapes) do
      {list, key} =
        Enum.map_reduce(shapes, key, fn {i, o}, key ->
          {w, key} = Nx.Random.normal(key, 0.0, 1 / :math.sqrt(i), shape: {i, o})
          {[w, Nx.broadcast(0.0, {o})], key}
        end)

      {list |> List.flatten() |> List.to_tuple(), key}
    end

    defp weights(key, shapes) do
      {list, key} =
        Enum.map_reduce(shapes, key, fn {i, o}, key ->
          Nx.Random.normal(key, 0.0, 1 / :math.sqrt(i), shape: {i, o})
        end)

      {List.to_tuple(list), key}
    end

    defp on_mlx(t), do: Nx.Defn.Composite.traverse(t, &Nx.backend_copy(&1, ExMLX.Backend))

    defp read(result) do
      [result] |> Nx.Defn.Composite.flatten_list() |> Enum.each(&Nx.to_binary/1)
    end

    defp us(nil), do: "—"
    defp us(s), do: fmt(s * 1.0e6)
    defp fmt(x) when x >= 100, do: :erlang.float_to_binary(x, decimals: 0)
    defp fmt(x), do: :erlang.float_to_binary(x, decimals: 1)
    defp ratio(nil), do: "—"
    defp ratio(r), do: :erlang.float_to_binary(r, decimals: 2) <> "×"
    defp ratio(_, nil), do: "—"
    defp ratio(nil, _), do: "—"
    defp ratio(a, b), do: ratio(a / b)

    # the mean of two timings; nil if either is missing
    defp mean(a, b) when is_number(a) and is_number(b), do: (a + b) / 2
    defp mean(_, _), do: nil

    # the middle value (the upper one of an even count); nil for none
    defp median(values) do
      case values |> Enum.reject(&is_nil/1) |> Enum.sort() do
        [] -> nil
        sorted -> Enum.at(sorted, div(length(sorted), 2))
      end
    end
  end
end
