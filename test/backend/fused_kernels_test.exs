if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.FusedKernelsTest do
    # ExMLX.Compiler with `fuse: true` records the composed forms of RMS
    # normalization and softmax as MLX's fused kernels
    # (ExMLX.Compiler.FusedKernels): the programs' ops, and their values
    # against the formulas computed here and against the unfused programs.
    use ExUnit.Case, async: true

    defmodule Funs do
      import Nx.Defn

      # Bumblebee's `rms_norm` layer (`upcast: :normalization`)
      defn rms_norm(x, w) do
        x |> Nx.as_type(:f32) |> normalize() |> Nx.as_type(Nx.type(x)) |> Nx.multiply(w)
      end

      defnp normalize(x) do
        variance = x |> Nx.pow(2) |> Nx.mean(axes: [-1], keep_axes: true)
        x * Nx.rsqrt(variance + 1.0e-6)
      end

      # Axon's `softmax` activation
      defn softmax(x) do
        max = stop_grad(Nx.reduce_max(x, axes: [-1], keep_axes: true))
        e = Nx.exp(x - max)
        Nx.multiply(1 / Nx.sum(e, axes: [-1], keep_axes: true), e)
      end

      # the mean over the first axis: not RMS normalization
      defn column_norm(x, w) do
        variance = x |> Nx.pow(2) |> Nx.mean(axes: [0], keep_axes: true)
        x * Nx.rsqrt(variance + 1.0e-6) * w
      end
    end

    # `fun` on `args` compiled with `opts`: the result, and the names of
    # the ops of the program it ran (`fun` a closure of its own for each
    # output type and `:fuse`: the compiler's cache keys programs by it)
    defp run(fun, args, opts) do
      result = apply(Nx.Defn.jit(fun, [compiler: ExMLX.Compiler, device: :cpu] ++ opts), args)

      fuse = Keyword.get(opts, :fuse, false)
      types = [ExMLX.Backend.storage_type(result.type)]

      [program] =
        for {{^fun, _device, ^fuse, _templates, _hooked},
             {:program, %{program: p, types: ^types}}} <-
              ExMLX.ProgramCache.entries(),
            do: p

      {_device, _inputs, _constants, instructions, _outputs} = ExMLX.ProgramCache.spec(program)
      {result, Enum.map(instructions, &elem(&1, 0))}
    end

    defp values(n, scale), do: for(i <- 1..n, do: :math.sin(i * 0.7) * scale)

    # x / sqrt(mean(x²) + 1e-6) · w along each row of `rows`
    defp rms_norm_rows(rows, w) do
      for row <- rows do
        r = 1 / :math.sqrt(Enum.sum(Enum.map(row, &(&1 * &1))) / length(row) + 1.0e-6)
        row |> Enum.zip(w) |> Enum.map(fn {v, k} -> v * r * k end)
      end
    end

    defp assert_close(tensor, expected, rtol) do
      got = Nx.to_flat_list(tensor)
      expected = List.flatten(expected)
      assert length(got) == length(expected)

      for {g, e} <- Enum.zip(got, expected) do
        assert abs(g - e) <= rtol * max(abs(e), 1.0), "#{g} against #{e}"
      end
    end

    # Funs.rms_norm on `count` rows of `width` values of `type`: with
    # `fuse: true` one rms_norm op, within `rtol` of the formula on the
    # values as stored and of the unfused program
    defp check_rms_norm(type, count, width, rtol) do
      x = Nx.tensor(Enum.chunk_every(values(count * width, 3.0), width), type: type)
      w = Nx.tensor(values(width, 1.5), type: type)
      [x, w] = Enum.map([x, w], &Nx.backend_transfer(&1, ExMLX.Backend))
      stored = Enum.chunk_every(Nx.to_flat_list(x), width)
      expected = rms_norm_rows(stored, Nx.to_flat_list(w))

      {got, ops} = run(fn x, w -> Funs.rms_norm(x, w) end, [x, w], fuse: true)
      assert ops == [:rms_norm]
      assert got.type == type
      assert_close(got, expected, rtol)

      {unfused, plain_ops} = run(fn x, w -> Funs.rms_norm(x, w) end, [x, w], [])
      assert :rms_norm not in plain_ops and :rsqrt in plain_ops
      assert_close(got, Nx.to_flat_list(unfused), rtol)
    end

    test "RMS normalization in float32 is one rms_norm op with fuse: true" do
      check_rms_norm({:f, 32}, 6, 16, 1.0e-6)
    end

    test "RMS normalization of bfloat16 computed in float32 is one rms_norm op" do
      # normalized in float32, rounded to bfloat16, scaled and rounded again
      check_rms_norm({:bf, 16}, 4, 64, 2 * 2 ** -8)
    end

    test "softmax is one softmax op with fuse: true" do
      rows = Enum.chunk_every(values(3 * 10, 4.0), 10)
      x = Nx.tensor(rows, type: :f32, backend: ExMLX.Backend)

      expected =
        for row <- rows do
          m = Enum.max(row)
          e = Enum.map(row, &:math.exp(&1 - m))
          Enum.map(e, &(&1 / Enum.sum(e)))
        end

      fused = fn x -> Funs.softmax(x) end
      {got, ops} = run(fused, [x], fuse: true)
      assert ops == [:softmax]
      assert_close(got, expected, 1.0e-6)

      plain = fn x -> Funs.softmax(x) end
      {unfused, plain_ops} = run(plain, [x], [])
      assert :softmax not in plain_ops and :exp in plain_ops
      assert_close(got, Nx.to_flat_list(unfused), 1.0e-6)
    end

    test "a normalization over another axis keeps its ops" do
      rows = Enum.chunk_every(values(4 * 8, 3.0), 8)
      x = Nx.tensor(rows, type: :f32, backend: ExMLX.Backend)
      w = Nx.tensor(values(8, 1.0), type: :f32, backend: ExMLX.Backend)
      fused = fn x, w -> Funs.column_norm(x, w) end
      {got, ops} = run(fused, [x, w], fuse: true)
      assert :rms_norm not in ops and :rsqrt in ops
      plain = fn x, w -> Funs.column_norm(x, w) end
      {unfused, _ops} = run(plain, [x, w], [])
      assert Nx.to_binary(got) == Nx.to_binary(unfused)
    end
  end
end
