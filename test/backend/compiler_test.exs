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

      defn mlp(x, w1, b1, w2, b2) do
        x
        |> Nx.dot(w1)
        |> Nx.add(b1)
        |> Nx.max(0)
        |> Nx.dot(w2)
        |> Nx.add(b2)
        |> softmax()
      end

      defn softmax(t) do
        e = Nx.exp(t - Nx.reduce_max(t, axes: [-1], keep_axes: true))
        e / Nx.sum(e, axes: [-1], keep_axes: true)
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

      defn(grad_of_square_sum(t), do: grad(t, fn t -> Nx.sum(t * t) end))

      defn(passthrough(t), do: {t, Nx.tensor([1.0, 2.0]), t + 1})
    end

    defp binary(fun, args) do
      args = Enum.map(args, &Nx.backend_copy(&1, Nx.BinaryBackend))
      Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(fun, args) end)
    end

    defp compiled(fun, args), do: apply(Nx.Defn.jit(fun, compiler: ExMLX.Compiler), args)

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

    test "export writes the program format; import runs it without tracing" do
      args = mlp_args()

      bytes = ExMLX.Compiler.export(&Funs.mlp/5, args)
      assert <<"EXMLXPRG", 1::little-16, _::binary>> = bytes
      run = ExMLX.Compiler.import(bytes)
      [got] = run.(args)
      assert_all_close(got, binary(&Funs.mlp/5, args))

      assert_raise ArgumentError, ~r/cannot export this function as one program: .*:while/, fn ->
        ExMLX.Compiler.export(&Funs.countdown/1, [Nx.tensor(3)])
      end
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
          timeout: 60_000
        )
        |> Enum.map(fn {:ok, r} -> r end)

      for {i, got} <- results do
        x = Nx.multiply(Nx.iota({2, 3}, type: {:f, 32}), i)
        assert_all_close(got, binary(&Funs.affine/3, [x, w, b]))
      end
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

    test "a while loop runs on the Evaluator, with the same results" do
      assert compiled(&Funs.countdown/1, [Nx.tensor(5)]) |> Nx.to_number() == 0
      assert {:evaluator, reason} = cached(&Funs.countdown/1, [Nx.tensor(5)])
      assert reason =~ ":while"
    end

    # How many programs ExMLX.Compiler has cached.
    defp programs do
      Enum.count(ExMLX.ProgramCache.entries(), fn
        {{_fun, _device, _templates}, {:program, _}} -> true
        _ -> false
      end)
    end

    defp cached(fun, args) do
      templates = Enum.map(args, &{&1.shape, &1.type, &1.names, &1.vectorized_axes})

      Enum.find_value(ExMLX.ProgramCache.entries(), fn
        {{_key, _device, ^templates}, compiled} -> compiled
        _ -> nil
      end)
      |> tap(fn found -> assert found, "nothing cached for #{inspect(fun)}" end)
    end
  end
end
