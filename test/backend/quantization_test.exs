if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.QuantizationTest do
    # Quantized Nx tensors (ExMLX.Quantization): Nx.dot with a quantized
    # kernel against the product with its dequantized values computed here,
    # other ops on the dequantized values, what is stored, and the errors.
    use ExUnit.Case, async: true

    doctest ExMLX.Quantization

    alias ExMLX.Quantization, as: Q
    alias ExMLX.TestHelpers

    import ExMLX.TestHelpers, only: [pseudo_random: 3]

    defp tensor(values, shape, type \\ :f32),
      do:
        values
        |> Nx.tensor(type: :f32, backend: ExMLX.Backend)
        |> Nx.reshape(shape)
        |> Nx.as_type(type)

    defp rows(t), do: t |> Nx.as_type(:f32) |> Nx.to_list()

    # Σ over the contracted axes, in Elixir floats: x {.., k} · w where
    # `w` is a list of rows {k, n}
    defp product(x_rows, w_rows) do
      columns = Enum.zip_with(w_rows, & &1)

      for row <- x_rows do
        for column <- columns, do: row |> Enum.zip_with(column, &(&1 * &2)) |> Enum.sum()
      end
    end

    # (nested lists of floats, within `rtol` of the expected ones or of 1)
    defp assert_close(got, expected, rtol),
      do: TestHelpers.assert_close(List.flatten(got), List.flatten(expected), rtol, "values")

    test "a quantized tensor keeps its shape and type and stores the packed triple" do
      w = tensor(pseudo_random(64 * 128, 1.0, 3), {64, 128})
      wq = Q.quantize(w, bits: 4, group_size: 64)
      assert {wq.shape, wq.type, wq.names} == {w.shape, w.type, w.names}
      assert Q.quantized?(wq) and not Q.quantized?(w)
      # 64 rows of 128 values: 4-bit values in 16 words, two f32 scales and biases a row
      assert Q.stored_bytes(wq) == 64 * (16 * 4 + 2 * 4 + 2 * 4)
      assert Nx.byte_size(wq) == 64 * 128 * 4

      # MLX's rows of scale · q + bias, as ExMLX.dequantize gives them
      %ExMLX.Backend{quantization: q} = wq.data
      dequantized = ExMLX.dequantize(q.packed, q.scales, q.biases, bits: 4, group_size: 64)
      assert Nx.to_binary(Q.dequantize(wq)) == ExMLX.to_binary(dequantized)

      assert inspect(wq) =~
               "ExMLX.Backend<#{ExMLX.default_device()}, quantized 4-bit, groups of 64>"
    end

    test "Nx.dot with a quantized kernel is the product with its dequantized values" do
      # Axon's dense layer: x {batch, seq, in} · kernel {in, out}, the kernel
      # stored transposed (grouped along `in`) or as it is (along `out`)
      {k, n} = {128, 64}
      w = tensor(pseudo_random(k * n, 0.5, 7), {k, n})
      x = tensor(pseudo_random(2 * 3 * k, 1.0, 11), {2, 3, k})

      for transpose <- [true, false] do
        group_size = if transpose, do: 64, else: 32
        wq = Q.quantize(w, bits: 4, group_size: group_size, transpose: transpose)
        got = Nx.dot(x, [2], wq, [0])
        assert got.shape == {2, 3, n} and got.type == {:f, 32}
        expected = x |> rows() |> Enum.flat_map(& &1) |> product(rows(Q.dequantize(wq)))
        assert_close(rows(got), expected, 1.0e-5)
        # MLX's quantized_matmul on the stored values, not a dequantized matrix
        %ExMLX.Backend{quantization: q} = wq.data
        opts = [transpose: transpose, group_size: group_size, bits: 4]

        direct =
          ExMLX.quantized_matmul(ExMLX.Backend.from_nx(x), q.packed, q.scales, q.biases, opts)

        assert Nx.to_binary(got) == ExMLX.to_binary(direct)
      end

      # contracting the kernel's second axis: x {m, n} · wᵀ
      wq = Q.quantize(w, bits: 8, group_size: 64)
      y = tensor(pseudo_random(4 * n, 1.0, 13), {4, n})
      got = Nx.dot(y, [1], wq, [1])
      assert got.shape == {4, k}
      w_rows = wq |> Q.dequantize() |> rows() |> Enum.zip_with(& &1)
      assert_close(rows(got), product(rows(y), w_rows), 1.0e-5)

      # x contracted over its first axis: xᵀ · w
      z = tensor(pseudo_random(k * 2, 1.0, 17), {k, 2})
      got = Nx.dot(z, [0], wq, [0])
      assert got.shape == {2, n}
      z_rows = z |> rows() |> Enum.zip_with(& &1)
      assert_close(rows(got), product(z_rows, rows(Q.dequantize(wq))), 1.0e-5)
    end

    test "a quantized left operand of Nx.dot runs quantized_matmul too" do
      w = tensor(pseudo_random(64 * 128, 0.5, 79), {64, 128})
      y = tensor(pseudo_random(128 * 3, 1.0, 83), {128, 3})
      z = tensor(pseudo_random(2 * 64 * 5, 1.0, 89), {2, 64, 5})

      for transpose <- [true, false] do
        group_size = if transpose, do: 64, else: 128
        wq = Q.quantize(w, bits: 4, group_size: group_size, transpose: transpose)
        plain = rows(Q.dequantize(wq))

        # w · y: contracting w's second axis
        got = Nx.dot(wq, [1], y, [0])
        assert got.shape == {64, 3}
        assert_close(rows(got), product(plain, rows(y)), 1.0e-5)

        # wᵀ · z over z's middle axis: {128, 2, 5}
        got = Nx.dot(wq, [0], z, [1])
        assert got.shape == {128, 2, 5}
        w_columns = Enum.zip_with(plain, & &1)

        expected =
          for column <- w_columns do
            for batch <- rows(z), do: product([column], batch) |> hd()
          end

        assert_close(rows(got), expected, 1.0e-5)
      end

      # compiled: the product on the packed values, no dequantized matrix
      wq = Q.quantize(w, bits: 4, group_size: 64, transpose: true)
      left = fn w, y -> Nx.dot(w, [1], y, [0]) end
      got = Nx.Defn.jit(left, compiler: ExMLX.Compiler).(wq, y)
      assert Nx.to_binary(got) == Nx.to_binary(left.(wq, y))
      ops = program_ops(left)
      assert :quantized_matmul in ops and :dequantize not in ops

      # a slice of its product's rows with fuse: true: the quantized operand
      # is not sliced (its product is made whole, then sliced)
      last_row = fn w, y -> Nx.dot(w, [1], y, [0])[-1] end
      got = Nx.Defn.jit(last_row, compiler: ExMLX.Compiler, fuse: true).(wq, y)
      assert_close([Nx.to_flat_list(got)], [List.last(rows(left.(wq, y)))], 1.0e-6)
    end

    test "bfloat16 kernels run quantized in bfloat16" do
      w = tensor(pseudo_random(128 * 32, 0.5, 19), {128, 32}, :bf16)
      x = tensor(pseudo_random(128, 1.0, 23), {1, 128}, :bf16)
      wq = Q.quantize(w, bits: 4, group_size: 64, transpose: true)
      got = Nx.dot(x, wq)
      assert got.type == {:bf, 16}

      # MLX's quantized_matmul itself on the stored values (its bits are
      # Python mlx's: test/ex_mlx/quantization_mlx_test.exs)
      %ExMLX.Backend{quantization: q} = wq.data

      direct =
        ExMLX.quantized_matmul(ExMLX.Backend.from_nx(x), q.packed, q.scales, q.biases,
          transpose: true,
          group_size: 64,
          bits: 4
        )

      assert Nx.to_binary(got) == ExMLX.to_binary(direct)

      # and near the product of the dequantized values: MLX's CPU kernel
      # rounds its bfloat16 partial sums, up to 2^-8 of Σ|x·w| at each of a
      # few rounding steps
      [x_row] = rows(x)

      for {g, column} <-
            Enum.zip(List.flatten(rows(got)), Enum.zip_with(rows(Q.dequantize(wq)), & &1)) do
        terms = Enum.zip_with(x_row, column, &(&1 * &2))
        bound = 8 * 2 ** -8 * Enum.sum(Enum.map(terms, &abs/1))
        assert abs(g - Enum.sum(terms)) <= bound
      end
    end

    test "other ops read the dequantized values" do
      w = tensor(pseudo_random(8 * 64, 2.0, 29), {8, 64})
      wq = Q.quantize(w, bits: 3, group_size: 32)
      plain = Q.dequantize(wq)
      assert Nx.to_binary(Nx.add(wq, 1.0)) == Nx.to_binary(Nx.add(plain, 1.0))
      assert Nx.to_binary(Nx.sum(wq, axes: [1])) == Nx.to_binary(Nx.sum(plain, axes: [1]))
      # a quantized left operand of Nx.dot: the dequantized values too
      v = tensor(pseudo_random(64, 1.0, 31), {64})
      assert Nx.to_binary(Nx.dot(wq, v)) == Nx.to_binary(Nx.dot(plain, v))
      assert Nx.to_flat_list(Nx.backend_transfer(wq, Nx.BinaryBackend)) == Nx.to_flat_list(plain)
    end

    test "transposing, and reshaping or slicing whole rows, keeps the stored values" do
      # a fused {out, in} layer as a checkpoint stores it (three row blocks),
      # split the way Bumblebee splits Phi-3's query, key and value
      w = tensor(pseudo_random(12 * 64, 1.0, 37), {12, 64})
      wq = Q.quantize(w, bits: 4, group_size: 32)
      plain = Q.dequantize(wq)
      %ExMLX.Backend{quantization: stored} = wq.data

      t = Nx.transpose(wq)
      assert Q.quantized?(t) and t.shape == {64, 12}
      assert Q.describe(t) =~ "stored transposed"
      assert Nx.to_binary(Q.dequantize(t)) == Nx.to_binary(Nx.transpose(plain))
      # the same stored tensors, read the other way
      %ExMLX.Backend{quantization: flipped} = t.data
      assert Q.stored_refs(flipped) == Q.stored_refs(stored)
      assert Nx.transpose(t) |> Q.dequantize() |> Nx.to_binary() == Nx.to_binary(plain)

      blocks = Nx.reshape(wq, {3, 4, 64})
      assert Q.quantized?(blocks)
      key = blocks |> Nx.slice_along_axis(1, 1, axis: 0) |> Nx.reshape({4, 64})
      assert Q.quantized?(key) and key.shape == {4, 64}
      %ExMLX.Backend{quantization: k} = key.data
      # 4 rows of 64 4-bit values: 8 words, 2 scales and biases a row
      assert {k.packed.shape, k.scales.shape, k.biases.shape} == {{4, 8}, {4, 2}, {4, 2}}
      assert Nx.to_binary(Q.dequantize(key)) == Nx.to_binary(plain[4..7])

      # and a product with the split kernel, as a dense layer runs it
      kernel = Nx.transpose(key)
      x = tensor(pseudo_random(2 * 64, 1.0, 41), {2, 64})
      got = Nx.dot(x, kernel)
      expected = product(rows(x), rows(Q.dequantize(kernel)))
      assert_close(rows(got), expected, 1.0e-5)

      # the same inside a program, on a quantized argument
      split = fn w, x ->
        key = w |> Nx.reshape({3, 4, 64}) |> Nx.slice_along_axis(1, 1, axis: 0)
        Nx.dot(x, Nx.transpose(Nx.reshape(key, {4, 64})))
      end

      compiled = Nx.Defn.jit(split, compiler: ExMLX.Compiler).(wq, x)
      assert Nx.to_binary(compiled) == Nx.to_binary(got)
      ops = program_ops(split)
      assert :quantized_matmul in ops and :dequantize not in ops

      # a slice of some columns (the grouped axis), or of a transposed
      # matrix, reads the dequantized values
      columns = Nx.slice(wq, [0, 0], [12, 32])
      refute Q.quantized?(columns)
      assert Nx.to_binary(columns) == Nx.to_binary(Nx.slice(plain, [0, 0], [12, 32]))
      rows_of_t = Nx.slice(t, [0, 0], [32, 12])
      refute Q.quantized?(rows_of_t)

      assert Nx.to_binary(rows_of_t) ==
               Nx.to_binary(Nx.slice(Nx.transpose(plain), [0, 0], [32, 12]))

      flat = Nx.reshape(wq, {12 * 64})
      refute Q.quantized?(flat)
      assert Nx.to_binary(flat) == Nx.to_binary(Nx.reshape(plain, {12 * 64}))
    end

    test "quantize_params quantizes the dense kernels :only accepts" do
      params = %{
        "a" => %{"kernel" => tensor(pseudo_random(128 * 16, 0.5, 43), {128, 16})},
        "b" => %{"kernel" => tensor(pseudo_random(64 * 16, 0.5, 47), {64, 16})},
        "c" => %{"scale" => tensor(pseudo_random(64 * 2, 0.5, 53), {64, 2})}
      }

      only = fn layer, _name -> layer != "b" end
      quantized = Q.quantize_params(params, bits: 4, group_size: 64, only: only)
      assert Q.quantized?(quantized["a"]["kernel"])
      assert quantized["b"]["kernel"] == params["b"]["kernel"]
      assert quantized["c"] == params["c"]

      # a dense layer's product with the quantized kernel: grouped along `in`
      %ExMLX.Backend{quantization: q} = quantized["a"]["kernel"].data
      assert q.transposed and q.packed.shape == {16, div(128 * 4, 32)}
      x = tensor(pseudo_random(2 * 128, 1.0, 59), {2, 128})
      got = Nx.dot(x, quantized["a"]["kernel"])
      expected = product(rows(x), rows(Q.dequantize(quantized["a"]["kernel"])))
      assert_close(rows(got), expected, 1.0e-5)

      assert_raise ArgumentError, ":only must be a function of 2 arguments, got: :all", fn ->
        Q.quantize_params(params, only: :all)
      end
    end

    # the names of the ops of the program ExMLX.Compiler made for `fun`
    # with a quantized argument (kept under the program for plain
    # arguments and the arguments' quantization)
    defp program_ops(fun) do
      entries = ExMLX.ProgramCache.entries()

      [program] =
        for {{^fun, _device, _fuse, _templates, _hooked}, {:program, %{program: plain}}} <-
              entries,
            {{:quantized, ^plain, [_ | _]}, {:program, %{program: p}}} <- entries,
            do: p

      {_device, _inputs, _constants, instructions, _outputs} = ExMLX.ProgramCache.spec(program)
      Enum.map(instructions, &elem(&1, 0))
    end

    test "ExMLX.Compiler programs take quantized kernels without dequantizing them" do
      w = tensor(pseudo_random(128 * 32, 0.5, 61), {128, 32})
      x = tensor(pseudo_random(3 * 128, 1.0, 67), {3, 128})
      wq = Q.quantize(w, bits: 4, group_size: 64, transpose: true)

      dense = fn x, w -> x |> Nx.dot(w) |> Nx.add(1.0) end
      got = Nx.Defn.jit(dense, compiler: ExMLX.Compiler).(x, wq)
      assert Nx.to_binary(got) == Nx.to_binary(dense.(x, wq))
      ops = program_ops(dense)
      assert :quantized_matmul in ops and :dequantize not in ops

      # the same function on the plain kernel: another program, its own values
      plain = Nx.Defn.jit(dense, compiler: ExMLX.Compiler).(x, w)
      assert Nx.to_binary(plain) == Nx.to_binary(dense.(x, w))

      # any other use reads the dequantized values, inside the program
      shifted = fn w -> Nx.multiply(w, 2.0) end
      got = Nx.Defn.jit(shifted, compiler: ExMLX.Compiler).(wq)
      assert Nx.to_binary(got) == Nx.to_binary(Nx.multiply(Q.dequantize(wq), 2.0))
      assert :dequantize in program_ops(shifted)

      # given back as it is: its values
      same = fn w -> w end
      got = Nx.Defn.jit(same, compiler: ExMLX.Compiler).(wq)
      assert not Q.quantized?(got)
      assert Nx.to_binary(got) == Nx.to_binary(Q.dequantize(wq))
    end

    test "a tensor quantized inside a program feeds its Nx.dot as packed values" do
      w = tensor(pseudo_random(128 * 32, 0.5, 97), {128, 32})
      x = tensor(pseudo_random(3 * 128, 1.0, 101), {3, 128})

      dense = fn x, w ->
        wq = Q.quantize(w, bits: 4, group_size: 64, transpose: true)
        {Nx.dot(x, wq), Nx.multiply(wq, 2.0)}
      end

      # eagerly: quantize, then quantized_matmul; other uses the dequantized values
      wq = Q.quantize(w, bits: 4, group_size: 64, transpose: true)
      expected = Nx.dot(x, wq)
      doubled = Nx.multiply(Q.dequantize(wq), 2.0)
      assert_close(rows(expected), product(rows(x), rows(Q.dequantize(wq))), 1.0e-5)

      {got, got_doubled} = Nx.Defn.jit(dense, compiler: ExMLX.Compiler).(x, w)
      assert Nx.to_binary(got) == Nx.to_binary(expected)
      assert Nx.to_binary(got_doubled) == Nx.to_binary(doubled)

      [ops] =
        for {{^dense, _device, _fuse, _quantized, _hooked}, {:program, %{program: p}}} <-
              ExMLX.ProgramCache.entries() do
          {_device, _inputs, _constants, instructions, _outputs} = ExMLX.ProgramCache.spec(p)
          Enum.map(instructions, &elem(&1, 0))
        end

      assert :quantize in ops and :quantized_matmul in ops and :dequantize in ops
      refute :matmul in ops

      # Nx.Defn.Evaluator on ExMLX.Backend: the same ops
      {evaluated, _} = Nx.Defn.jit(dense, compiler: Nx.Defn.Evaluator).(x, w)
      assert Nx.to_binary(evaluated) == Nx.to_binary(expected)

      # on another backend: MLX's quantized values, dequantized
      {on_binary, binary_doubled} =
        Nx.Defn.jit(dense, compiler: Nx.Defn.Evaluator).(
          Nx.backend_copy(x, Nx.BinaryBackend),
          Nx.backend_copy(w, Nx.BinaryBackend)
        )

      assert %Nx.BinaryBackend{} = binary_doubled.data
      assert Nx.to_binary(binary_doubled) == Nx.to_binary(doubled)
      assert_close(rows(on_binary), rows(expected), 1.0e-5)

      # the errors of an eager quantize, raised while tracing
      for {opts, input} <- [{[bits: 7], w}, {[group_size: 48], w}, {[], Nx.iota({4, 64})}] do
        eager = assert_raise ExMLX.Error, fn -> Q.quantize(input, opts) end

        traced =
          assert_raise ExMLX.Error, fn ->
            Nx.Defn.jit(&Q.quantize(&1, opts), compiler: ExMLX.Compiler).(input)
          end

        assert {traced.kind, traced.message} == {eager.kind, eager.message}
      end

      assert_raise ExMLX.Error,
                   "bits: quantization takes bits of [2, 3, 4, 5, 6, 8], got 7",
                   fn -> Nx.Defn.jit(&Q.quantize(&1, bits: 7), compiler: ExMLX.Compiler).(w) end
    end

    test "an embedding's rows are dequantized alone, its tied product stays quantized" do
      emb = tensor(pseudo_random(256 * 64, 1.0, 71), {256, 64})
      layer = "embedder.token_embedding"
      %{^layer => %{"kernel" => eq}} = Q.quantize_params(%{layer => %{"kernel" => emb}})
      %ExMLX.Backend{quantization: q} = eq.data
      # grouped along its rows: stored as it is
      refute q.transposed
      plain = Q.dequantize(eq)

      ids = Nx.tensor([[3, 200, 7], [0, 255, 3]], backend: ExMLX.Backend)
      assert Nx.to_binary(Nx.take(eq, ids)) == Nx.to_binary(Nx.take(plain, ids))
      indices = Nx.reshape(ids, {6, 1})
      assert Nx.to_binary(Nx.gather(eq, indices)) == Nx.to_binary(Nx.gather(plain, indices))

      lookup = fn e, i -> Nx.take(e, i) end
      got = Nx.Defn.jit(lookup, compiler: ExMLX.Compiler).(eq, ids)
      assert Nx.to_binary(got) == Nx.to_binary(Nx.take(plain, ids))
      ops = program_ops(lookup)
      assert Enum.count(ops, &(&1 == :take)) == 3 and Enum.count(ops, &(&1 == :dequantize)) == 1

      # a tied output layer: x · embeddingᵀ
      x = tensor(pseudo_random(2 * 64, 1.0, 73), {2, 64})
      got = Nx.dot(x, [1], eq, [1])
      direct = ExMLX.quantized_matmul(ExMLX.Backend.from_nx(x), q.packed, q.scales, q.biases)
      assert Nx.to_binary(got) == ExMLX.to_binary(direct)
      w_rows = plain |> rows() |> Enum.zip_with(& &1)
      assert_close(rows(got), product(rows(x), w_rows), 1.0e-5)
    end

    test "bad input is an error that names it" do
      w = tensor(pseudo_random(4 * 64, 1.0, 37), {4, 64})

      assert_raise ArgumentError,
                   "tensor: quantize takes a matrix (rank 2), got shape {256}",
                   fn -> Q.quantize(Nx.reshape(w, {256})) end

      assert_raise ExMLX.Error,
                   "bits: quantization takes bits of [2, 3, 4, 5, 6, 8], got 7",
                   fn -> Q.quantize(w, bits: 7) end

      assert_raise ExMLX.Error,
                   "tensor: quantize needs a last axis that is a multiple of the group " <>
                     "size 64, got shape {64, 4}",
                   fn -> Q.quantize(w, transpose: true) end

      wq = Q.quantize(w, bits: 4, group_size: 64)

      assert_raise ArgumentError,
                   "tensor: already quantized (quantized 4-bit, groups of 64)",
                   fn -> Q.quantize(wq) end

      mode_error =
        ":mode must be :affine (MLX's scale-and-bias quantization; ExMLX does not " <>
          "keep other modes), got: :mxfp4"

      assert_raise ArgumentError, mode_error, fn -> Q.quantize(w, mode: :mxfp4) end

      assert_raise ArgumentError, mode_error, fn ->
        Q.quantize_params(%{"dense" => %{"kernel" => w}}, mode: :mxfp4)
      end

      assert Q.quantize(w, mode: :affine) |> Q.quantized?()
    end
  end
end
