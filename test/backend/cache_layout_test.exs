if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.CacheLayoutTest do
    # ExMLX.Compiler with `fuse: true` keeps a loop-carried cache that the
    # loop writes `{batch, position, heads, depth}` and reads only through
    # `transpose(axes: [0, 2, 1, 3])` with its axes 1 and 2 swapped
    # (ExMLX.Compiler.CacheLayout): the loop's values and results against
    # the same steps computed here on lists, and the program's loop.
    use ExUnit.Case, async: true

    @heads 2
    @positions 5
    @depth 3

    defmodule Funs do
      import Nx.Defn

      # Bumblebee's decoding loop in small: each step writes the row of
      # position `i` of a `{1, positions, heads, depth}` cache and reads the
      # whole cache through transposes (attention scores of a query, and a
      # weighted sum of the values).
      defn decode(cache, query, steps) do
        {cache, _i, scores, mixed, _query, _steps} =
          while {cache, i = 0, scores = Nx.broadcast(0.0, {1, 2, 1, 5}),
                 mixed = Nx.broadcast(0.0, {1, 2, 1, 3}), query, steps},
                i < steps do
            row = Nx.iota({1, 1, 2, 3}, type: :f32) |> Nx.add(i * 10)
            cache = Nx.put_slice(cache, [0, i, 0, 0], row)
            keys = Nx.transpose(cache, axes: [0, 2, 1, 3])
            s = Nx.dot(query, [3], [0, 1], keys, [3], [0, 1])
            values = cache |> Nx.transpose(axes: [0, 2, 1, 3])
            m = Nx.dot(s, [3], [0, 1], values, [2], [0, 1])
            {cache, i + 1, scores + s, mixed + m, query, steps}
          end

        {cache, scores, mixed}
      end

      # the same loop reading the cache without a transpose too: kept as
      # Nx stores it
      defn decode_and_sum(cache, steps) do
        {cache, _i, total, _steps} =
          while {cache, i = 0, total = 0.0, steps}, i < steps do
            row = Nx.iota({1, 1, 2, 3}, type: :f32) |> Nx.add(i * 10)
            cache = Nx.put_slice(cache, [0, i, 0, 0], row)
            keys = Nx.transpose(cache, axes: [0, 2, 1, 3])
            total = total + Nx.sum(keys[[0, 0, .., 0]]) + Nx.sum(cache[[0, .., 1, 2]])
            {cache, i + 1, total, steps}
          end

        {cache, total}
      end
    end

    # the cache after `steps` steps (nested lists, {1, positions, heads, depth}),
    # given its initial rows
    defp written(initial, steps) do
      for {rows, p} <- Enum.with_index(initial) do
        if p < steps do
          for h <- 0..(@heads - 1), do: for(d <- 0..(@depth - 1), do: h * @depth + d + p * 10.0)
        else
          rows
        end
      end
    end

    # query · keys and its product with the values, per step, summed
    defp steps_expected(initial, query, steps) do
      zero_s = for _ <- 1..@heads, do: List.duplicate(0.0, @positions)
      zero_m = for _ <- 1..@heads, do: List.duplicate(0.0, @depth)

      Enum.reduce(0..(steps - 1), {zero_s, zero_m}, fn step, {scores, mixed} ->
        cache = written(initial, step + 1)

        s =
          for h <- 0..(@heads - 1) do
            q = Enum.at(query, h)
            for p <- 0..(@positions - 1), do: dot(q, cache |> Enum.at(p) |> Enum.at(h))
          end

        m =
          for h <- 0..(@heads - 1) do
            for d <- 0..(@depth - 1) do
              Enum.sum(
                for p <- 0..(@positions - 1),
                    do: Enum.at(Enum.at(s, h), p) * Enum.at(Enum.at(Enum.at(cache, p), h), d)
              )
            end
          end

        {add(scores, s), add(mixed, m)}
      end)
    end

    defp dot(a, b), do: a |> Enum.zip(b) |> Enum.map(fn {x, y} -> x * y end) |> Enum.sum()
    defp add(a, b), do: Enum.zip_with(a, b, fn x, y -> Enum.zip_with(x, y, &+/2) end)

    defp initial_rows do
      for p <- 0..(@positions - 1) do
        for h <- 0..(@heads - 1), do: for(d <- 0..(@depth - 1), do: -(p + h + d) * 1.0)
      end
    end

    # the ops of the while loop's body in the program `fun` ran with `fuse`
    defp loop_ops(fun, fuse) do
      [program] =
        for {{^fun, _device, ^fuse, _templates, _hooked}, {:program, %{program: p}}} <-
              ExMLX.ProgramCache.entries(),
            do: p

      {_device, _inputs, _constants, instructions, _outputs} = ExMLX.ProgramCache.spec(program)

      [{:while, _initial, _condition, {body, _}}] =
        Enum.filter(instructions, &(elem(&1, 0) == :while))

      Enum.map(body, &elem(&1, 0))
    end

    defp cpu(list), do: Nx.tensor(list, type: :f32, backend: {ExMLX.Backend, device: :cpu})

    for fuse <- [true, false] do
      test "a cache read through transposes, fuse: #{fuse}" do
        fuse = unquote(fuse)
        fun = &Funs.decode/3
        initial = initial_rows()
        query = [[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]]
        jit = Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu, fuse: fuse)
        steps = 4

        {cache, scores, mixed} =
          jit.(cpu([initial]), cpu([Enum.map(query, &[&1])]), steps)

        {expected_scores, expected_mixed} = steps_expected(initial, query, steps)
        assert Nx.shape(cache) == {1, @positions, @heads, @depth}
        assert Nx.to_list(cache) == [written(initial, steps)]
        assert Nx.to_list(scores) == [Enum.map(expected_scores, &[&1])]
        assert Nx.to_list(mixed) == [Enum.map(expected_mixed, &[&1])]
      end
    end

    test "the loop's reads of the cache are no transposes with fuse: true" do
      fun = &Funs.decode/3
      query = cpu([[[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]]])

      for fuse <- [true, false] do
        Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu, fuse: fuse).(
          cpu([initial_rows()]),
          query,
          2
        )
      end

      # the two reads' transposes gone, the written row's added
      transposes = fn fuse -> fun |> loop_ops(fuse) |> Enum.count(&(&1 == :transpose)) end
      assert transposes.(true) == transposes.(false) - 1
    end

    test "a cache also read without a transpose keeps its layout" do
      fun = &Funs.decode_and_sum/2
      initial = initial_rows()
      jit = Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu, fuse: true)
      {cache, total} = jit.(cpu([initial]), 3)

      expected =
        Enum.sum(
          for step <- 0..2 do
            c = written(initial, step + 1)
            # keys[0, 0, .., 0]: head 0, depth 0 of every position;
            # cache[0, .., 1, 2]: head 1, depth 2 of every position
            Enum.sum(for p <- c, do: hd(hd(p))) +
              Enum.sum(for p <- c, do: p |> Enum.at(1) |> Enum.at(2))
          end
        )

      assert Nx.to_list(cache) == [written(initial, 3)]
      assert Nx.to_number(total) == expected
    end
  end
end
