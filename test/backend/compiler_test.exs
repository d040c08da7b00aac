if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.CompilerTest do
    # ExMLX.Compiler against Nx.BinaryBackend running the same defn
    # functions through Nx's own Evaluator (an independent implementation).
    use ExUnit.Case, async: false

    defp assert_all_close(left, right) do
      left = Nx.backend_copy(left, Nx.BinaryBackend)
      right = Nx.backend_copy(right, Nx.BinaryBackend)
      close = Nx.all_close(left, right, atol: 1.0e-5, rtol: 1.0e-5) |> Nx.to_number()
      assert close == 1, "not close:\n#{inspect(left)}\n#{inspect(right)}"
    end

    doctest ExMLX.Compiler

    defmodule Funs do
      import Nx.Defn

      defn(affine(x, w, b), do: Nx.dot(x, w) + b)

      defn(mlp(x, w1, b1, w2, b2), do: softmax(relu_mlp(x, w1, b1, w2, b2)))

      defn relu_mlp(x, w1, b1, w2, b2) do
        x
        |> Nx.dot(w1)
        |> Nx.add(b1)
        |> Nx.max(0)
        |> Nx.dot(w2)
        |> Nx.add(b2)
      end

      defn softmax(t) do
        e = Nx.exp(t - Nx.reduce_max(t, axes: [-1], keep_axes: true))
        e / Nx.sum(e, axes: [-1], keep_axes: true)
      end

      defn chain(x) do
        y = Nx.tanh(x * 1.1 + 0.1) * 0.9 - 0.01
        Nx.sigmoid(Nx.exp(-Nx.abs(y)) / 2 - Nx.sqrt(Nx.abs(x)))
      end

      defn chain_in_loop(x) do
        {_, x} =
          while {i = 0, x}, i < 3 do
            {i + 1, Nx.tanh(x * 1.1 + 0.1) * 0.9 - 0.01}
          end

        x
      end

      defn(stats(t), do: {Nx.mean(t), Nx.sum(t * t), Nx.argmax(t)})

      defn(with_constants(t), do: t * 2.5 + Nx.tensor([1.0, 2.0, 3.0]))

      defn countdown(n) do
        {n, _} =
          while {n, i = 0}, Nx.greater(n, 0) do
            {n - 1, i + 1}
          end

        n
      end

      # row i of `cache` (cyclically) set to row i mod 8 of `rows` plus i, for
      # i in 0..n-1: a loop writing into a large carry, as a language model's
      # key/value cache
      defn fill_rows(cache, rows, n) do
        {cache, _rows, _i, _n} =
          while {cache, rows, i = 0, n}, i < n do
            row = Nx.slice_along_axis(rows, rem(i, 8), 1, axis: 0) + i
            {Nx.put_slice(cache, [rem(i, Nx.axis_size(cache, 0)), 0], row), rows, i + 1, n}
          end

        cache
      end

      # fill_rows/3 on a carry the program makes itself: `seed` broadcast
      # to 2048 × 512, `rows` written at its top (as a prompt's keys are
      # written into a new cache)
      defn fill_made_rows(seed, rows, n) do
        cache = seed |> Nx.broadcast({2048, 512}) |> Nx.put_slice([0, 0], rows)
        fill_rows(cache, rows, n)
      end

      # 40 tensors of x's size made before a loop that reads only a 4 × 4
      # corner of them (its condition needs the device's values)
      defn made_before_a_loop(x) do
        y = chain_sin(x, 20)
        y = Nx.slice(y, [0, 0], [4, 4])

        {y, i} =
          while {y, i = 0}, i < 50 and Nx.sum(Nx.abs(y)) > 0 do
            {y * 0.5, i + 1}
          end

        i + Nx.sum(y)
      end

      deftransformp(chain_sin(x, n),
        do: Enum.reduce(1..n, x, fn k, acc -> Nx.add(Nx.sin(acc), k) end)
      )

      # Collatz steps of each element: a cond inside a while, reading a value
      # from outside the loop (one) through the state
      defn collatz_steps(n) do
        {_, steps, _} =
          while {n, steps = Nx.broadcast(0, n), one = 1}, Nx.any(n > one) do
            next =
              cond do
                Nx.all(Nx.remainder(n, 2) == 0) -> Nx.quotient(n, 2)
                true -> Nx.select(Nx.remainder(n, 2) == 0, Nx.quotient(n, 2), 3 * n + 1)
              end

            next = Nx.select(n > one, next, n)
            {next, steps + (n > one), one}
          end

        steps
      end

      # a three-way cond whose clauses share a value of the enclosing scope,
      # with a while inside one clause, and a tuple result
      defn branches(x) do
        s = Nx.sum(x)
        shared = Nx.exp(x)

        cond do
          s > 10 ->
            {x * 2, shared}

          s < 0 ->
            {_, y, _} = while({i = 0, y = x, shared}, i < 3, do: {i + 1, y * shared, shared})
            {y, -shared}

          true ->
            {x + s, shared + 1}
        end
      end

      defn hooked(x) do
        y = hook(x * 3, :triple)
        z = hook(y + 1, fn t -> send(self(), {:second, Nx.to_flat_list(t)}) end)
        z * 2
      end

      defn hooked_loop(x) do
        {x, _} = while({x, i = 0}, i < 3, do: {hook(x + 1, :step), i + 1})
        x
      end

      defn forever(x) do
        {x, _} = while({x, i = 0}, i >= 0, do: {x + 1, i + 1})
        x
      end

      defn countdown_scaled(n, x) do
        {_, x} = while({n, x}, n > 0, do: {n - 1, x * 2})
        x
      end

      defn(reduce_with_fun(t), do: Nx.reduce(t, 0, fn a, b -> a + b end))

      defn(grad_of_square_sum(t), do: grad(t, fn t -> Nx.sum(t * t) end))

      defn(passthrough(t), do: {t, Nx.tensor([1.0, 2.0]), t + 1})

      defn(identity(x), do: x)

      # linear algebra (which MLX runs on the CPU only) and writes and sums
      # of 64-bit integers (which MLX's CUDA scatter cannot do)
      defn cpu_only_and_wide_writes(a, b, ids) do
        {q, r} = Nx.LinAlg.qr(a)
        at = Nx.tensor([3], type: :s64)
        wide = Nx.tensor([-7, 1_099_511_627_776], type: :s64)

        {q, r, Nx.LinAlg.solve(a, b), Nx.put_slice(ids, [1], wide),
         Nx.indexed_put(ids, Nx.new_axis(at, 1), Nx.tensor([-1_125_899_906_842_624], type: :s64)),
         Nx.indexed_add(
           ids,
           Nx.tensor([[0], [0], [2]]),
           Nx.tensor([5, 6, 1_099_511_627_776], type: :s64)
         )}
      end

      defn(transposed_product(a, b), do: Nx.transpose(Nx.dot(a, [0], b, [0])))

      # a gated recurrent cell over the sequence axis of xs, in a while loop
      # (as Axon unrolls an LSTM dynamically)
      defn recurrent(xs, wx, wh, b) do
        h0 = Nx.broadcast(0.0, {Nx.axis_size(xs, 0), Nx.axis_size(wh, 0)})

        {_, h, _, _, _, _} =
          while {i = 0, h = h0, xs, wx, wh, b}, i < Nx.axis_size(xs, 1) do
            x = xs |> Nx.slice_along_axis(i, 1, axis: 1) |> Nx.squeeze(axes: [1])
            z = Nx.dot(x, wx) + Nx.dot(h, wh) + b
            gate = Nx.sigmoid(z)
            {i + 1, gate * Nx.tanh(z) + (1 - gate) * Nx.exp(-Nx.abs(h)) * h, xs, wx, wh, b}
          end

        h
      end

      # one SGD step of a small classifier with a log-softmax cross-entropy
      # loss (reduce_max, exp, log, sums; the gradient's tie counts are
      # integer sums)
      defn classifier_step({w1, b1, w2, b2}, x, labels) do
        {loss, {g1, gb1, g2, gb2}} =
          value_and_grad({w1, b1, w2, b2}, fn {w1, b1, w2, b2} ->
            logits = x |> Nx.dot(w1) |> Nx.add(b1) |> Nx.max(0) |> Nx.dot(w2) |> Nx.add(b2)
            shifted = logits - Nx.reduce_max(logits, axes: [1], keep_axes: true)
            log_probs = shifted - Nx.log(Nx.sum(Nx.exp(shifted), axes: [1], keep_axes: true))
            -Nx.mean(Nx.sum(log_probs * labels, axes: [1]))
          end)

        {loss, {w1 - 0.1 * g1, b1 - 0.1 * gb1, w2 - 0.1 * g2, b2 - 0.1 * gb2}}
      end

      defn recurrent_step(xs, wx, wh, b) do
        value_and_grad({wx, wh, b}, fn {wx, wh, b} ->
          xs |> recurrent(wx, wh, b) |> Nx.pow(2) |> Nx.sum()
        end)
      end
    end

    defp binary(fun, args) do
      args = Enum.map(args, &Nx.backend_copy(&1, Nx.BinaryBackend))
      Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(fun, args) end)
    end

    defp compiled(fun, args), do: apply(Nx.Defn.jit(fun, compiler: ExMLX.Compiler), args)

    # `fun` of `args` through ExMLX.Compiler gives Nx.Defn.Evaluator's bits on
    # ExMLX.Backend, and values close to Nx.BinaryBackend's
    defp assert_evaluator_bits(fun, args) do
      got = compiled(fun, args)
      # (the Evaluator's constants made on ExMLX too: its eager ops)
      evaluator =
        Nx.with_default_backend(ExMLX.Backend, fn ->
          apply(Nx.Defn.jit(fun, compiler: Nx.Defn.Evaluator), args)
        end)

      flat = fn t -> t |> List.wrap() |> Nx.Defn.Composite.flatten_list() end

      assert Enum.map(flat.(got), &Nx.to_binary/1) ==
               Enum.map(flat.(evaluator), &Nx.to_binary/1)

      Enum.zip(flat.(got), flat.(binary(fun, args)))
      |> Enum.each(fn {g, b} -> assert_all_close(g, b) end)
    end

    defp key(seed), do: Nx.Random.key(seed)

    defp normal(seed, shape) do
      Nx.with_default_backend(Nx.BinaryBackend, fn ->
        {t, _} = Nx.Random.normal(key(seed), shape: shape)
        t
      end)
    end

    # x {4, 8}, w1 {8, 16}, b1 {16}, w2 {16, 3}, b2 {3}
    defp mlp_args,
      do:
        Enum.map(Enum.with_index([{4, 8}, {8, 16}, {16}, {16, 3}, {3}], 1), fn {s, i} ->
          normal(i, s)
        end)

    test "an MLP's forward pass matches Nx.BinaryBackend" do
      args = mlp_args()

      got = compiled(&Funs.mlp/5, args)
      assert %Nx.Tensor{data: %ExMLX.Backend{}, shape: {4, 3}, type: {:f, 32}} = got
      assert_all_close(got, binary(&Funs.mlp/5, args))
    end

    @tag :cpu_kernels
    test "a batch-1 MLP runs on the calling thread: read while the worker is held, with the Evaluator's bits" do
      # x {1, 600}, w1 {600, 512} (a product in blocks the worker helps
      # with), b1 {512}, w2 {512, 16}, b2 {16} (weights scaled as an
      # initializer would), all computed on ExMLX
      args =
        Enum.map(Enum.with_index([{1, 600}, {600, 512}, {512}, {512, 16}, {16}], 1), fn {s, i} ->
          scale = if tuple_size(s) == 2 and i > 1, do: 0.04, else: 1.0
          i |> normal(s) |> Nx.multiply(scale) |> Nx.backend_copy(ExMLX.Backend)
        end)

      fun = Nx.Defn.jit(&Funs.relu_mlp/5, compiler: ExMLX.Compiler)
      # (the first call may run on the worker, behind the evaluation of the
      # program's constant 0)
      first = apply(fun, args) |> Nx.to_binary()

      evaluator = apply(Nx.Defn.jit(&Funs.relu_mlp/5, compiler: Nx.Defn.Evaluator), args)

      assert first == Nx.to_binary(evaluator)
      assert_all_close(evaluator, binary(&Funs.relu_mlp/5, args))

      hold = make_ref()
      :ok = ExMLX.Native.hold_worker_for_test(hold)
      parent = self()

      try do
        spawn_link(fn -> send(parent, {:read, apply(fun, args) |> Nx.to_binary()}) end)
        assert_receive {:read, bytes}, 120_000
        assert bytes == first
      after
        ExMLX.Native.release_worker_for_test()
      end

      assert_receive {^hold, {:ok, true}}, 120_000
    end

    test "a small recurrent loop and its gradient (host-computed steps on the CPU) have the Evaluator's bits" do
      # xs {2, 6, 8}, wx {8, 5}, wh {5, 5}, b {5}: every tensor small, so a
      # CPU run computes the loops' steps on the host, with MLX's bits
      args =
        [{{2, 6, 8}, 1.0}, {{8, 5}, 0.3}, {{5, 5}, 0.3}, {{5}, 0.1}]
        |> Enum.with_index(1)
        |> Enum.map(fn {{shape, scale}, i} ->
          i |> normal(shape) |> Nx.multiply(scale) |> Nx.backend_copy(ExMLX.Backend)
        end)

      for fun <- [&Funs.recurrent/4, &Funs.recurrent_step/4] do
        assert_evaluator_bits(fun, args)
      end
    end

    test "a small classifier's training step (computed on the host on the CPU) has the Evaluator's bits" do
      # x {4, 6}, w1 {6, 8}, w2 {8, 3}: every tensor small, so a CPU run
      # computes every op on the host, with MLX's bits
      [x, w1, w2] =
        [{{4, 6}, 1.0}, {{6, 8}, 0.4}, {{8, 3}, 0.4}]
        |> Enum.with_index(11)
        |> Enum.map(fn {{shape, scale}, i} -> i |> normal(shape) |> Nx.multiply(scale) end)

      labels = Nx.equal(Nx.iota({4, 3}, axis: 1), Nx.remainder(Nx.iota({4, 1}), 3))

      args =
        Enum.map(
          [{w1, Nx.broadcast(0.0, {8}), w2, Nx.broadcast(0.0, {3})}, x, Nx.as_type(labels, :f32)],
          fn t -> Nx.Defn.Composite.traverse(t, &Nx.backend_copy(&1, ExMLX.Backend)) end
        )

      assert_evaluator_bits(&Funs.classifier_step/3, args)
    end

    test "several outputs, integer results and constants" do
      t = Nx.tensor([[1.0, 5.0, 2.0], [0.5, -1.0, 4.0]])
      {mean, squares, argmax} = compiled(&Funs.stats/1, [t])
      {bmean, bsquares, bargmax} = binary(&Funs.stats/1, [t])
      assert_all_close(mean, bmean)
      assert_all_close(squares, bsquares)
      assert Nx.to_number(argmax) == Nx.to_number(bargmax)
      assert argmax.type == bargmax.type

      got = compiled(&Funs.with_constants/1, [Nx.tensor([1.0, 2.0, 4.0])])
      assert Nx.to_flat_list(got) == [3.5, 7.0, 13.0]
    end

    test "outputs may be inputs, constants the graph captured, or results" do
      t = Nx.tensor([3.0, 4.0], backend: Nx.BinaryBackend)
      {same, constant, plus} = compiled(&Funs.passthrough/1, [t])
      assert Nx.to_flat_list(same) == [3.0, 4.0]
      assert Nx.to_flat_list(constant) == [1.0, 2.0]
      assert Nx.to_flat_list(plus) == [4.0, 5.0]
      assert %ExMLX.Backend{} = constant.data
    end

    test "linear algebra and 64-bit integer writes and sums run inside the program" do
      # On a GPU (the suite's default device there) MLX runs the factorisations
      # on the CPU only and has no 64-bit integer scatter: the worker runs
      # them on its CPU stream or as u32 pairs, with no transfer, so the
      # function stays compiled (no Evaluator fallback) and matches Nx.
      a = Nx.tensor([[4.0, 1.0, 2.0], [1.0, 3.0, 0.5], [2.0, 0.5, 5.0]])
      b = Nx.tensor([1.0, 2.0, 3.0])
      ids = Nx.tensor([1, 2, 3, 4], type: :s64)
      args = Enum.map([a, b, ids], &Nx.backend_copy(&1, ExMLX.Backend))

      {got, log} =
        ExUnit.CaptureLog.with_log([level: :debug], fn ->
          Nx.with_default_backend(ExMLX.Backend, fn ->
            compiled(&Funs.cpu_only_and_wide_writes/3, args)
          end)
        end)

      refute log =~ "running on Nx.Defn.Evaluator"
      {q, r, x, put, indexed_put, indexed_add} = got

      {bq, br, bx, bput, bindexed_put, bindexed_add} =
        binary(&Funs.cpu_only_and_wide_writes/3, [a, b, ids])

      for {ours, theirs} <- [{q, bq}, {r, br}, {x, bx}], do: assert_all_close(ours, theirs)
      assert Nx.to_flat_list(put) == [1, -7, 1_099_511_627_776, 4]
      assert Nx.to_flat_list(indexed_put) == [1, 2, 3, -1_125_899_906_842_624]
      assert Nx.to_flat_list(indexed_add) == [12, 2, 1_099_511_627_779, 4]

      for {ours, theirs} <- [
            {put, bput},
            {indexed_put, bindexed_put},
            {indexed_add, bindexed_add}
          ],
          do: assert(Nx.to_flat_list(ours) == Nx.to_flat_list(theirs))
    end

    test "gradients compile (they are ordinary graphs)" do
      t = Nx.tensor([1.0, -2.0, 3.0])
      assert Nx.to_flat_list(compiled(&Funs.grad_of_square_sum/1, [t])) == [2.0, -4.0, 6.0]
    end

    test "one program per input shape and type, reused across calls" do
      # (a function of this test only: its programs are not cached by others)
      f = Nx.Defn.jit(fn x, w, b -> Funs.affine(x, w, b) end, compiler: ExMLX.Compiler)
      x = Nx.iota({2, 3}, type: {:f, 32})
      w = Nx.iota({3, 2}, type: {:f, 32})
      b = Nx.tensor([1.0, -1.0])
      before = programs()
      first = f.(x, w, b)
      assert programs() == before + 1
      second = f.(Nx.add(x, 1), w, b)
      assert programs() == before + 1
      assert_all_close(first, binary(&Funs.affine/3, [x, w, b]))
      assert_all_close(second, binary(&Funs.affine/3, [Nx.add(x, 1), w, b]))
      f.(Nx.iota({5, 3}, type: {:f, 32}), w, b)
      assert programs() == before + 2
    end

    test "the transpose of a matrix product is computed as the product in the other order" do
      a = Nx.iota({3, 2}, type: {:f, 32})
      b = Nx.iota({3, 4}, type: {:f, 32}) |> Nx.subtract(5)
      got = compiled(&Funs.transposed_product/2, [a, b])
      assert got.shape == {4, 2}
      assert Nx.to_flat_list(got) == Nx.to_flat_list(binary(&Funs.transposed_product/2, [a, b]))
      {:program, %{program: program}} = cached(&Funs.transposed_product/2, [a, b])
      {_device, _inputs, _constants, instructions, _outputs} = ExMLX.ProgramCache.spec(program)
      assert [{:tensordot, [1, 0], [[0], [0]], {:f, 32}, 1}] = instructions
    end

    test "a program makes each of its constants once (Nx.Random's threefry repeats its scalars)" do
      fun = fn key -> key |> Nx.Random.uniform(shape: {4}) |> elem(0) end
      key = key(3)
      assert Nx.to_flat_list(compiled(fun, [key])) == Nx.to_flat_list(binary(fun, [key]))
      {:program, %{program: program}} = cached(fun, [key])
      {_device, _inputs, constants, _instructions, _outputs} = ExMLX.ProgramCache.spec(program)

      values = for ref <- constants, do: {ExMLX.Call.info(ref), ExMLX.Op.to_binary(ref)}

      # (threefry's rotation amounts and key constants, each used many times)
      assert length(values) > 5
      assert length(Enum.uniq(values)) == length(values)
    end

    test "a template argument that the graph does not read runs as on Nx.Defn.Evaluator" do
      # (Axon initializes a model with templates of its inputs)
      f = fn t, x -> {Nx.add(x, 1), Nx.shape(t) |> Tuple.to_list() |> Nx.tensor()} end
      {plus, shape} = compiled(f, [Nx.template({2, 3}, :f32), Nx.tensor([1, 2])])
      assert Nx.to_flat_list(plus) == [2, 3]
      assert Nx.to_flat_list(shape) == [2, 3]

      # a graph that reads it fails as it does on the Evaluator (with
      # Nx.Defn.IncompatibleBackendsError on Nx 0.13, a RuntimeError on 0.12)
      [on_evaluator, on_ex_mlx] =
        for compiler <- [Nx.Defn.Evaluator, ExMLX.Compiler] do
          error =
            catch_error(
              Nx.with_default_backend(ExMLX.Backend, fn ->
                Nx.Defn.jit(&Nx.add(&1, 1), compiler: compiler).(Nx.template({2}, :f32))
              end)
            )

          {error.__struct__, Exception.message(error)}
        end

      assert on_ex_mlx == on_evaluator
      assert elem(on_ex_mlx, 1) =~ "two incompatible tensor implementations"
    end

    test "max pooling's gradient runs as one program, with Nx.BinaryBackend's values" do
      pool_grad = fn t ->
        Nx.Defn.grad(t, fn t -> t |> Nx.window_max({1, 2, 2}, strides: [1, 2, 2]) |> Nx.sum() end)
      end

      t = normal(4, {2, 4, 6})
      # (export raises for a function that does not compile to one program)
      assert is_binary(ExMLX.Compiler.export(pool_grad, [t]))
      assert_all_close(compiled(pool_grad, [t]), binary(pool_grad, [t]))
    end

    test "lazy arguments the graph does not read are never loaded" do
      pair = %ExMLX.Test.LazyPair{
        used: Nx.tensor([1.0, 2.0]),
        unused: Nx.tensor([5, 6, 7]),
        notify: self()
      }

      f = fn {used, _unused} -> Nx.multiply(used, 3) end

      # Nx.Defn.Evaluator is the reference: it loads what it reads
      for compiler <- [Nx.Defn.Evaluator, ExMLX.Compiler], _call <- 1..2 do
        result = Nx.Defn.jit(f, compiler: compiler).(pair)
        assert Nx.to_flat_list(result) == [3.0, 6.0]
        assert_received {:loaded, :used}
        refute_received {:loaded, _}, "#{inspect(compiler)} loaded an unread argument"
      end
    end

    test "closures of one code that captured other values keep their own programs, called in turn" do
      # (each process looks among its last programs by the key's value: the
      # same function term, an equal one, a function of other captures)
      funs =
        for k <- 1..10,
            do: {k, Nx.Defn.jit(fn x -> Nx.multiply(x, k) end, compiler: ExMLX.Compiler)}

      x = Nx.tensor([1.0, 2.0])

      for _round <- 1..3, {k, f} <- Enum.shuffle(funs) do
        assert Nx.to_flat_list(f.(x)) == [1.0 * k, 2.0 * k]
      end

      # a copy of a function term (equal, at another address) finds its program
      {k, f} = hd(funs)
      copy = :erlang.binary_to_term(:erlang.term_to_binary(f))
      assert Nx.to_flat_list(copy.(x)) == [1.0 * k, 2.0 * k]
    end

    test "arguments of another structure, same tensors, get their own program" do
      assert %Nx.Tensor{} = compiled(&Funs.identity/1, [1])
      assert {%Nx.Tensor{} = t} = compiled(&Funs.identity/1, [{1}])
      assert %{a: %Nx.Tensor{}} = compiled(&Funs.identity/1, [%{a: 1}])
      assert Nx.to_number(t) == 1
    end

    test "a closure that captured a heavily shared expression compiles (keyed by its ids)" do
      # 45 doublings of x: one node each, 2^45 paths from the result to x
      x = Nx.tensor([1.0, 2.0])
      doubling = fn x -> Enum.reduce(1..45, x, fn _, acc -> Nx.add(acc, acc) end) end
      expr = Nx.Defn.debug_expr(doubling).(x)

      # as Nx.Defn.Graph.run jits a stage: a closure returning the expression
      # (run in this process: sending the expression to another would copy
      # it path by path)
      result = Nx.Defn.jit_apply(fn _ -> expr end, [{x}], compiler: ExMLX.Compiler)
      assert Nx.to_flat_list(result) == [2.0 ** 45, 2.0 ** 46]
    end

    test "fuse: true on the cpu: element-wise groups give the unfused program's bits" do
      # only exactly rounded ops fuse (docs/numerics.md): fused or not,
      # tanh, exp and sigmoid are MLX's kernels and + - * / sqrt round once,
      # so the bits are the same; both are close to Nx.BinaryBackend's float64
      # math rounded to float32
      x =
        Nx.iota({8192}, type: {:f, 32}, backend: Nx.BinaryBackend)
        |> Nx.subtract(4096)
        |> Nx.divide(512)
        |> Nx.backend_copy({ExMLX.Backend, device: :cpu})

      for fun <- [&Funs.chain/1, &Funs.chain_in_loop/1] do
        fused = Nx.Defn.jit(fun, compiler: ExMLX.Compiler, fuse: true, device: :cpu).(x)
        plain = Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu).(x)
        assert Nx.to_binary(fused) == Nx.to_binary(plain)
        assert_all_close(fused, binary(fun, [x]))
      end
    end

    test "a loop writing into a large carry keeps its memory flat over its steps" do
      # a 4 MiB carry updated a row a step: each step's value replaces the
      # last (MLX frees or reuses it), so the peak above what the call starts
      # with stays within a few carries, for 1,000 steps as for 10
      cache = Nx.broadcast(Nx.tensor(0.0, type: :f32, backend: ExMLX.Backend), {2048, 512})
      rows = Nx.iota({8, 512}, type: :f32, backend: ExMLX.Backend)
      f = Nx.Defn.jit(&Funs.fill_rows/3, compiler: ExMLX.Compiler)
      carry = 2048 * 512 * 4

      peak_above = fn n ->
        :erlang.garbage_collect()
        base = ExMLX.Memory.stats().active
        ExMLX.Memory.reset_peak()
        out = f.(cache, rows, n)
        first = out[0..1] |> Nx.to_flat_list()
        last = out[[998..1000]] |> Nx.to_flat_list()
        {(ExMLX.Memory.stats().peak - base) / carry, first, last}
      end

      {small, _, _} = peak_above.(10)
      {peak, first, last} = peak_above.(1000)
      assert small <= 3
      assert peak <= 3

      # row i holds row i mod 8 of the iota (512 * (i mod 8) + j) plus i;
      # row 1000 was never written
      row = fn i -> for j <- 0..511, do: 512.0 * rem(i, 8) + j + i end
      assert first == row.(0) ++ row.(1)
      assert last == row.(998) ++ row.(999) ++ List.duplicate(0.0, 512)
    end

    test "a carry the program made is handed to its loop, not copied" do
      # nothing reads the made carry after the loop: its one value is the
      # loop's state, which MLX then updates in place (a second carry, the
      # first step's copy, while the program held the first, before)
      seed = Nx.tensor(0.5, type: :f32, backend: ExMLX.Backend)
      rows = Nx.iota({8, 512}, type: :f32, backend: ExMLX.Backend)
      f = Nx.Defn.jit(&Funs.fill_made_rows/3, compiler: ExMLX.Compiler)
      carry = 2048 * 512 * 4
      f.(seed, rows, 100)
      :erlang.garbage_collect()
      0 = ExMLX.full(0, {:u, 8}, {}) |> ExMLX.item()
      :erlang.garbage_collect()
      base = ExMLX.Memory.stats().active
      ExMLX.Memory.reset_peak()
      out = f.(seed, rows, 100)
      # row 99 holds row 99 mod 8 of the iota plus 99; row 100 the seed
      assert out[99] |> Nx.to_flat_list() == for(j <- 0..511, do: 512.0 * 3 + j + 99)
      assert out[100] |> Nx.to_flat_list() == List.duplicate(0.5, 512)
      peak = (ExMLX.Memory.stats().peak - base) / carry
      assert peak <= 1.5
    end

    test "what a program made before a loop is freed while the loop runs" do
      # without that, the 40 intermediate tensors of 4 MiB the loop does not
      # read would stay allocated until the program ends
      x = Nx.iota({1024, 1024}, type: :f32, backend: ExMLX.Backend)
      f = Nx.Defn.jit(&Funs.made_before_a_loop/1, compiler: ExMLX.Compiler)
      f.(x)
      :erlang.garbage_collect()
      base = ExMLX.Memory.stats().active
      ExMLX.Memory.reset_peak()
      result = f.(x) |> Nx.to_number()
      peak = (ExMLX.Memory.stats().peak - base) / (1024 * 1024 * 4)
      assert peak <= 4
      # 50 halvings of values near 20: 50 + sum(y) / 2 ** 50 rounds to 50
      assert result == 50.0
    end

    test "fuse: true runs a small program unfused or fused, same results" do
      x = Nx.iota({1000}, type: {:f, 32}) |> Nx.divide(1000)
      fused = Nx.Defn.jit(&Funs.softmax/1, compiler: ExMLX.Compiler, fuse: true)
      assert_all_close(fused.(x), binary(&Funs.softmax/1, [x]))
      assert_all_close(fused.(x), binary(&Funs.softmax/1, [x]))
      # with a loop: runs unfused, same results
      f = Nx.Defn.jit(&Funs.collatz_steps/1, compiler: ExMLX.Compiler, fuse: true)
      assert Nx.to_flat_list(f.(Nx.tensor([6, 7, 1, 27]))) == [8, 16, 0, 111]

      assert_raise ArgumentError, ":fuse must be a boolean, got: :yes", fn ->
        Nx.Defn.jit(&Funs.softmax/1, compiler: ExMLX.Compiler, fuse: :yes).(x)
      end
    end

    test "an option the compiler does not take is an error naming it" do
      x = Nx.iota({4}, type: {:f, 32})

      message =
        "ExMLX.Compiler: unknown keys [:lazy_transfers] in [lazy_transfers: :always], " <>
          "the allowed keys are: [:device, :fuse, :hooks, :batch_keys]"

      assert_raise ArgumentError, message, fn ->
        Nx.Defn.jit(&Funs.softmax/1, compiler: ExMLX.Compiler, lazy_transfers: :always).(x)
      end

      assert_raise ArgumentError,
                   "unknown keys [:client] in [client: :host], the allowed keys are: [:device]",
                   fn -> Nx.default_backend({ExMLX.Backend, client: :host}) end
    end

    test "export writes the program format; import runs it without tracing" do
      args = mlp_args()

      bytes = ExMLX.Compiler.export(&Funs.mlp/5, args)
      assert <<"EXMLXPRG", 2::little-16, _::binary>> = bytes
      run = ExMLX.Compiler.import(bytes)
      [got] = run.(args)
      assert_all_close(got, binary(&Funs.mlp/5, args))

      # loops and branches are part of the format
      n = Nx.tensor([6, 7, 1, 27])
      run = ExMLX.Compiler.import(ExMLX.Compiler.export(&Funs.collatz_steps/1, [n]))
      [steps] = run.([n])
      assert Nx.to_flat_list(steps) == [8, 16, 0, 111]

      assert_raise ArgumentError,
                   ~r/cannot export this function as one program: reading a tensor's data/,
                   fn -> ExMLX.Compiler.export(&Funs.reduce_with_fun/1, [Nx.tensor([1, 2])]) end
    end

    @tag :tmp_dir
    test "an exported program runs in another VM, without Nx's tracing", %{tmp_dir: dir} do
      n = Nx.tensor([6, 7, 1, 27])
      path = Path.join(dir, "collatz.exmlx")
      File.write!(path, ExMLX.Compiler.export(&Funs.collatz_steps/1, [n]))

      script = """
      {:ok, _} = Application.ensure_all_started(:ex_mlx)
      run = ExMLX.Compiler.import(File.read!(#{inspect(path)}))
      [steps] = run.([Nx.tensor([6, 7, 1, 27])])
      IO.inspect({Nx.to_flat_list(steps), :code.is_loaded(Nx.Defn.Expr)})
      """

      {out, status} = ExMLX.TestHelpers.elixir(script)
      assert {status, out} == {0, "{[8, 16, 0, 111], false}\n"}
    end

    test "64 processes calling one compiled function at once all get their own result" do
      f = Nx.Defn.jit(&Funs.affine/3, compiler: ExMLX.Compiler)
      w = Nx.iota({3, 2}, type: {:f, 32})
      b = Nx.tensor([1.0, -1.0])

      results =
        1..64
        |> Task.async_stream(
          fn i ->
            x = Nx.multiply(Nx.iota({2, 3}, type: {:f, 32}), i)
            {i, f.(x, w, b) |> Nx.backend_copy(Nx.BinaryBackend)}
          end,
          max_concurrency: 64,
          timeout: :infinity
        )
        |> Enum.map(fn {:ok, r} -> r end)

      for {i, got} <- results do
        x = Nx.multiply(Nx.iota({2, 3}, type: {:f, 32}), i)
        assert_all_close(got, binary(&Funs.affine/3, [x, w, b]))
      end
    end

    test "64 processes running one compiled loop at once each get their own result" do
      f = Nx.Defn.jit(&Funs.collatz_steps/1, compiler: ExMLX.Compiler)
      # Collatz step counts of 1..64, by the definition, in Elixir
      steps = fn n ->
        Stream.iterate(n, &if(rem(&1, 2) == 0, do: div(&1, 2), else: 3 * &1 + 1))
        |> Enum.take_while(&(&1 != 1))
        |> length()
      end

      results =
        1..64
        |> Task.async_stream(fn i -> {i, f.(Nx.tensor([i, i + 1])) |> Nx.to_flat_list()} end,
          max_concurrency: 64,
          timeout: :infinity
        )
        |> Enum.map(fn {:ok, r} -> r end)

      for {i, got} <- results, do: assert(got == [steps.(i), steps.(i + 1)], "n = #{i}")
    end

    test "an error in a compiled call (out of memory) is raised at the call, and the VM goes on" do
      f = Nx.Defn.jit(&Funs.affine/3, compiler: ExMLX.Compiler)
      x = Nx.iota({2, 3}, type: {:f, 32})
      w = Nx.iota({3, 2}, type: {:f, 32})
      b = Nx.tensor([1.0, -1.0])
      assert %Nx.Tensor{} = f.(x, w, b)
      # a caller killed while it waits for its program leaves nothing behind
      pid = spawn(fn -> for _ <- 1..1000, do: f.(x, w, b) end)
      Process.sleep(5)
      Process.exit(pid, :kill)

      limit = ExMLX.Memory.stats().memory_limit

      try do
        ExMLX.Memory.set_memory_limit(1024)

        assert_raise ExMLX.Error, ~r/memory limit/, fn ->
          f.(Nx.iota({200, 3}, type: {:f, 32}), w, b) |> Nx.to_binary()
        end
      after
        ExMLX.Memory.set_memory_limit(limit)
      end

      assert_all_close(f.(x, w, b), binary(&Funs.affine/3, [x, w, b]))
    end

    test "Nx.Serving runs a batch through ExMLX.Compiler" do
      serving =
        Nx.Serving.jit(&Funs.softmax/1, compiler: ExMLX.Compiler)
        |> Nx.Serving.process_options(batch_size: 2)

      batch = Nx.Batch.stack([Nx.tensor([1.0, 2.0, 3.0]), Nx.tensor([0.0, 0.0, 0.0])])
      got = Nx.Serving.run(serving, batch)

      assert_all_close(
        got,
        binary(&Funs.softmax/1, [
          Nx.stack([Nx.tensor([1.0, 2.0, 3.0]), Nx.tensor([0.0, 0.0, 0.0])])
        ])
      )
    end

    test "a function compiled ahead of time holds its program, and what its function captured once" do
      # a captured term large beside everything else the function holds
      offsets = Enum.to_list(1..100_000)
      fun = fn x -> Nx.add(x, length(offsets)) end
      x = Nx.tensor([1.0, 2.0])
      before = programs()
      compiled = Nx.Defn.compile(fun, [Nx.template({2}, :f32)], compiler: ExMLX.Compiler)
      # recorded by Nx.Defn.compile/3, before any call
      assert programs() == before + 1

      # a call in a process of its own, as Nx.Serving runs a batch, with the
      # cache emptied: the function runs the program it holds
      :ets.delete_all_objects(ExMLX.ProgramCache)
      got = Task.async(fn -> compiled.(x) |> Nx.to_flat_list() end) |> Task.await()
      assert got == [100_001.0, 100_002.0]
      assert programs() == 0

      # the captured list once (as in `fun` itself), not once more in a
      # cache key: a process started with the function copies all it holds
      assert :erts_debug.flat_size(compiled) < 2 * :erts_debug.flat_size(offsets)
    end

    test "while loops run inside the program, step by step" do
      assert compiled(&Funs.countdown/1, [Nx.tensor(5)]) |> Nx.to_number() == 0
      assert {:program, _} = cached(&Funs.countdown/1, [Nx.tensor(5)])
      # a condition false from the start
      assert compiled(&Funs.countdown/1, [Nx.tensor(-3)]) |> Nx.to_number() == -3

      # (Collatz step counts, known: 6 -> 8, 7 -> 16, 1 -> 0, 27 -> 111)
      n = Nx.tensor([6, 7, 1, 27])
      got = compiled(&Funs.collatz_steps/1, [n])
      assert Nx.to_flat_list(got) == [8, 16, 0, 111]
      assert Nx.to_flat_list(got) == Nx.to_flat_list(binary(&Funs.collatz_steps/1, [n]))
      assert {:program, _} = cached(&Funs.collatz_steps/1, [n])
    end

    test "a loop that starts from a captured tensor is lowered without waiting for its copy" do
      captured = Nx.tensor([0.5, 1.0], backend: Nx.BinaryBackend)
      fun = Nx.Defn.jit(&Funs.countdown_scaled(&1, captured), compiler: ExMLX.Compiler)
      hold = make_ref()
      :ok = ExMLX.Native.hold_worker_for_test(hold)
      parent = self()

      try do
        # the captured tensor's copy to ExMLX waits behind the held worker;
        # the call returns its result, pending too, all the same (the caller
        # lives on to read it: a loop stops when its caller is gone)
        caller =
          spawn_link(fn ->
            result = fun.(Nx.tensor(3))
            send(parent, :called)
            receive do: (:read -> send(parent, {:read, Nx.to_flat_list(result)}))
          end)

        assert_receive :called, 120_000
        send(caller, :read)
      after
        ExMLX.Native.release_worker_for_test()
      end

      assert_receive {^hold, {:ok, true}}, 120_000
      assert_receive {:read, [4.0, 8.0]}, 120_000
    end

    test "cond runs the first true clause; clauses share the enclosing scope's values" do
      for x <- [[1.0, 2.0], [10.0, 2.0], [-10.0, 2.0], [-1.0, 0.5]] do
        x = Nx.tensor(x)
        {a, b} = compiled(&Funs.branches/1, [x])
        {ea, eb} = binary(&Funs.branches/1, [x])
        assert_all_close(a, ea)
        assert_all_close(b, eb)
      end

      assert {:program, _} = cached(&Funs.branches/1, [Nx.tensor([1.0, 2.0])])
    end

    test "Nx.Random (threefry's while loops) compiles and matches Nx.BinaryBackend" do
      f = fn key -> Nx.Random.uniform(key, shape: {4}) end
      {got, next} = compiled(f, [key(42)])
      {expected, expected_next} = binary(f, [key(42)])
      assert Nx.to_flat_list(got) == Nx.to_flat_list(expected)
      assert Nx.to_flat_list(next) == Nx.to_flat_list(expected_next)
    end

    test "hooks are called after the run, in order, with their values; :hooks overrides" do
      pid = self()
      triple = fn t -> send(pid, {:triple, Nx.to_flat_list(t)}) end
      f = Nx.Defn.jit(&Funs.hooked/1, compiler: ExMLX.Compiler, hooks: %{triple: triple})
      assert Nx.to_flat_list(f.(Nx.tensor([1, 2]))) == [8, 14]
      assert_received {:triple, [3, 6]}
      assert_received {:second, [4, 7]}
      assert {:messages, []} = Process.info(self(), :messages)
      assert {:program, _} = cached(&Funs.hooked/1, [Nx.tensor([1, 2])])

      # without an override, the named hook (no function) is not called
      assert Nx.to_flat_list(compiled(&Funs.hooked/1, [Nx.tensor([1, 2])])) == [8, 14]
      assert_received {:second, [4, 7]}
      refute_received {:triple, _}
    end

    test "a hook inside a loop: compiled when no function is given, else run as the Evaluator does" do
      t = Nx.tensor([1, 5])
      assert Nx.to_flat_list(compiled(&Funs.hooked_loop/1, [t])) == [4, 8]
      assert {:program, _} = cached(&Funs.hooked_loop/1, [t])

      pid = self()
      step = fn t -> send(pid, {:step, Nx.to_flat_list(t)}) end

      for compiler <- [Nx.Defn.Evaluator, ExMLX.Compiler] do
        f = Nx.Defn.jit(&Funs.hooked_loop/1, compiler: compiler, hooks: %{step: step})
        assert Nx.to_flat_list(f.(t)) == [4, 8]
        assert_received {:step, [2, 6]}
        assert_received {:step, [3, 7]}
        assert_received {:step, [4, 8]}
        assert {:messages, []} = Process.info(self(), :messages)
      end
    end

    test "a callback that needs data falls back to the Evaluator, with the same results" do
      t = Nx.tensor([1, 2, 3])
      assert compiled(&Funs.reduce_with_fun/1, [t]) |> Nx.to_number() == 6
      assert {:evaluator, reason} = cached(&Funs.reduce_with_fun/1, [t])
      assert reason == "reading a tensor's data needs data at run time"
    end

    test "a loop whose caller is killed stops, and the worker goes on" do
      x = Nx.tensor(1.0)
      parent = self()

      pid =
        spawn(fn ->
          t = compiled(&Funs.forever/1, [x])
          send(parent, :started)
          Nx.to_number(t)
        end)

      assert_receive :started, 120_000
      Process.exit(pid, :kill)
      # the worker is free again: an eager op and a compiled call complete
      assert Nx.to_number(Nx.add(Nx.tensor(1), 2)) == 3
      assert compiled(&Funs.countdown/1, [Nx.tensor(2)]) |> Nx.to_number() == 0
    end

    test "an error inside a loop (out of memory) is raised where its results are read" do
      # each step makes a new 8,000-byte state, past a limit of 1,024 bytes
      x = Nx.iota({2000}, type: {:f, 32})
      f = Nx.Defn.jit(&Funs.countdown_scaled/2, compiler: ExMLX.Compiler)
      expected = Nx.multiply(x, 8) |> Nx.to_flat_list()
      # (the inputs exist before the limit is lowered)
      three = Nx.tensor(3, backend: ExMLX.Backend)
      assert Nx.to_flat_list(f.(three, x)) == expected
      limit = ExMLX.Memory.stats().memory_limit

      try do
        ExMLX.Memory.set_memory_limit(1024)
        # (raised at the call or where the result is read, as the worker goes)
        assert_raise ExMLX.Error, ~r/memory limit/, fn -> f.(three, x) |> Nx.to_binary() end
      after
        ExMLX.Memory.set_memory_limit(limit)
      end

      assert Nx.to_flat_list(f.(three, x)) == expected
    end

    # How many programs ExMLX.Compiler has cached.
    defp programs do
      Enum.count(ExMLX.ProgramCache.entries(), fn
        {{_fun, _device, _fuse, _templates, _hooked}, {:program, _}} -> true
        _ -> false
      end)
    end

    defp cached(fun, args) do
      templates = Enum.map(args, &{&1.shape, &1.type, &1.names, &1.vectorized_axes})

      Enum.find_value(ExMLX.ProgramCache.entries(), fn
        {{^fun, _device, false, ^templates, _hooked}, compiled} -> compiled
        _ -> nil
      end)
      |> tap(fn found -> assert found, "nothing cached for #{inspect(fun)}" end)
    end
  end
end
