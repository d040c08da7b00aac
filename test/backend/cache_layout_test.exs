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

      # Bumblebee's grouped-query attention in small: two key/value heads
      # repeated for four query heads (its `repeat_interleave`: `new_axis`,
      # `tile`, `flatten`) before the cache, which holds two positions of a
      # prompt; each step writes position `i` and attends to positions up
      # to `i`; with `slice_read`, the cache is read once more through a
      # transpose that is no attention's.
      defn grouped_decode(prompt, query, steps, opts \\ []) do
        cache = Nx.broadcast(0.0, {1, 5, 4, 3}) |> Nx.put_slice([0, 0, 0, 0], repeat(prompt))
        grouped_steps(cache, query, steps, opts)
      end

      # grouped_steps' attention from a longer cache of zeros, its
      # positions written from 0
      defn zeros_decode(query, steps) do
        cache = Nx.broadcast(0.0, {1, 256, 4, 3})

        {_cache, _i, out, _query, _steps} =
          while {cache, i = 0, out = Nx.broadcast(0.0, {1, 4, 1, 3}), query, steps}, i < steps do
            row = Nx.iota({1, 1, 2, 3}, type: :f32) |> Nx.divide(4) |> Nx.add(i / 10)
            cache = Nx.put_slice(cache, [0, i, 0, 0], repeat(row))
            mask = Nx.iota({1, 1, 1, 256}) |> Nx.less_equal(i)
            kt = Nx.transpose(cache, axes: [0, 2, 1, 3])
            vt = Nx.transpose(cache, axes: [0, 2, 1, 3])
            {cache, i + 1, out + attention(query, kt, vt, mask), query, steps}
          end

        out
      end

      # the same steps from a cache given whole (its heads not known to
      # repeat)
      defn grouped_steps(cache, query, steps, opts \\ []) do
        opts = keyword!(opts, slice_read: false)

        {_cache, _i, out, read, _query, _steps} =
          while {cache, i = 2, out = Nx.broadcast(0.0, {1, 4, 1, 3}), read = 0.0, query, steps},
                i < steps + 2 do
            row = Nx.iota({1, 1, 2, 3}, type: :f32) |> Nx.divide(4) |> Nx.add(i / 10)
            cache = Nx.put_slice(cache, [0, i, 0, 0], repeat(row))
            mask = Nx.iota({1, 1, 1, 5}) |> Nx.less_equal(i)
            kt = Nx.transpose(cache, axes: [0, 2, 1, 3])
            vt = Nx.transpose(cache, axes: [0, 2, 1, 3])
            attended = attention(query, kt, vt, mask)

            read =
              if opts[:slice_read] do
                read + Nx.sum(Nx.transpose(cache, axes: [0, 2, 1, 3])[[0, 3, .., 1]])
              else
                read
              end

            {cache, i + 1, out + attended, read, query, steps}
          end

        {out, read}
      end

      defnp repeat(x) do
        x |> Nx.new_axis(3) |> Nx.tile([1, 1, 1, 2, 1]) |> Nx.flatten(axes: [2, 3])
      end

      # Bumblebee's attention weights and output (layers.ex)
      defnp attention(q, kt, vt, mask) do
        weights = Nx.dot(q, [3], [0, 1], kt, [3], [0, 1])
        weights = weights * (1 / Nx.sqrt(3.0))
        weights = weights + Nx.select(mask, 0.0, Nx.Constants.min_finite(:f32))
        max = stop_grad(Nx.reduce_max(weights, axes: [3], keep_axes: true))
        e = Nx.exp(weights - max)
        p = Nx.multiply(1 / Nx.sum(e, axes: [3], keep_axes: true), e)
        Nx.dot(p, [3], [0, 1], vt, [2], [0, 1])
      end

      # Bumblebee's prompt pass and decoding loop over `layers` layers in
      # small: each layer's keys and values (two key/value heads repeated
      # for four query heads) written into zeros at the prompt's two
      # positions, then, each step, at position `i`, each layer attending
      # to them with the previous layer's output in its update
      defn deep_decode(prompt, query, steps, opts \\ []) do
        opts = keyword!(opts, layers: 17)
        mask = Nx.iota({1, 1, 1, 5}) |> Nx.less_equal(1)
        {caches, _x} = prompt_pass(prompt, query, mask, opts[:layers])

        {_caches, _i, out, _query, _steps} =
          while {caches, i = 2, out = Nx.broadcast(0.0, {1, 1, 2, 3}), query, steps},
                i < steps + 2 do
            row = Nx.iota({1, 1, 2, 3}, type: :f32) |> Nx.divide(4) |> Nx.add(i / 10)
            mask = Nx.iota({1, 1, 1, 5}) |> Nx.less_equal(i)
            {caches, x} = decode_step(caches, row, query, mask, i)
            {caches, i + 1, out + x, query, steps}
          end

        out
      end

      # every layer's {keys, values} caches (a flat tuple) and the last
      # layer's output
      deftransformp prompt_pass(prompt, query, mask, layers) do
        zeros = Nx.broadcast(0.0, {1, 5, 4, 3})

        {caches, x} =
          Enum.map_reduce(1..layers, prompt, fn _layer, x ->
            k = Nx.put_slice(zeros, [0, 0, 0, 0], repeat(x))
            v = Nx.put_slice(zeros, [0, 0, 0, 0], repeat(Nx.multiply(x, 0.5)))
            out = layer_attention(query, k, v, mask)
            {[k, v], Nx.add(prompt, Nx.reshape(out, {1, 2, 2, 3}) |> Nx.multiply(0.25))}
          end)

        {caches |> List.flatten() |> List.to_tuple(), x}
      end

      deftransformp decode_step(caches, row, query, mask, i) do
        {written, x} =
          caches
          |> Tuple.to_list()
          |> Enum.chunk_every(2)
          |> Enum.map_reduce(row, fn [k, v], x ->
            k = Nx.put_slice(k, [0, i, 0, 0], repeat(x))
            v = Nx.put_slice(v, [0, i, 0, 0], repeat(Nx.multiply(x, 0.5)))
            out = layer_attention(query, k, v, mask)

            {[k, v],
             Nx.add(row, Nx.reshape(out, {1, 1, 2, 6}) |> Nx.slice_along_axis(0, 3, axis: 3))}
          end)

        {written |> List.flatten() |> List.to_tuple(), x}
      end

      deftransformp layer_attention(query, k, v, mask) do
        attention(
          query,
          Nx.transpose(k, axes: [0, 2, 1, 3]),
          Nx.transpose(v, axes: [0, 2, 1, 3]),
          mask
        )
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

    # what the program `fun` ran with `fuse` was made from: `{device,
    # inputs, constants, instructions, outputs}`
    defp program_spec(fun, fuse) do
      [program] =
        for {{^fun, _device, ^fuse, _templates, _hooked}, {:program, %{program: p}}} <-
              ExMLX.ProgramCache.entries(),
            do: p

      ExMLX.ProgramCache.spec(program)
    end

    # the ops of the while loop's body in the program `fun` ran with `fuse`
    defp loop_ops(fun, fuse) do
      {_device, _inputs, _constants, instructions, _outputs} = program_spec(fun, fuse)

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

        {cache, scores, mixed} = jit.(cpu([initial]), cpu([Enum.map(query, &[&1])]), steps)

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

    # Funs.grouped_steps computed on lists: the summed attention outputs
    # ({4 heads, 3 depth}) and the summed reads of head 3, depth 1; `prompt`
    # the four heads of the first two positions
    defp grouped_expected(prompt, query, steps) do
      row = fn i ->
        for h <- 0..3, do: for(d <- 0..2, do: (div(h, 2) * 3 + d) / 4 + i / 10)
      end

      zero = {List.duplicate(List.duplicate(0.0, 3), 4), 0.0}

      Enum.reduce(2..(steps + 1), zero, fn i, {out, read} ->
        # positions 0..i, each {4 heads, 3}
        kv = prompt ++ Enum.map(2..i, row)

        attended =
          for h <- 0..3 do
            q = Enum.at(query, h)
            keys = Enum.map(kv, &Enum.at(&1, h))
            scores = Enum.map(keys, &(dot(q, &1) / :math.sqrt(3.0)))
            top = Enum.max(scores)
            e = Enum.map(scores, &:math.exp(&1 - top))
            total = Enum.sum(e)
            for d <- 0..2, do: Enum.sum(Enum.zip_with(e, keys, &(&1 / total * Enum.at(&2, d))))
          end

        # (positions past i are still zero)
        {add(out, attended), read + Enum.sum(for k <- kv, do: k |> Enum.at(3) |> Enum.at(1))}
      end)
    end

    for slice_read <- [false, true] do
      test "a cache of repeated heads, held at its source's, slice_read: #{slice_read}" do
        slice_read = unquote(slice_read)
        prompt = [[[1.0, 0.5, -1.0], [0.25, 2.0, 0.0]], [[-0.5, 1.5, 1.0], [0.75, -1.0, 0.5]]]
        query = [[1.0, -2.0, 0.5], [0.25, 3.0, -1.0], [0.0, 1.0, 1.0], [-1.0, 0.5, 2.0]]
        repeated = Enum.map(prompt, fn [a, b] -> [a, a, b, b] end)
        {expected_out, expected_read} = grouped_expected(repeated, query, 3)

        for fuse <- [true, false] do
          fun = &Funs.grouped_decode(&1, &2, &3, slice_read: slice_read)
          jit = Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu, fuse: fuse)
          {out, read} = jit.(cpu([prompt]), cpu([Enum.map(query, &[&1])]), 3)
          got = out |> Nx.to_flat_list()
          ExMLX.TestHelpers.assert_close(got, List.flatten(expected_out), 1.0e-5, "outputs")
          expected = if slice_read, do: expected_read, else: 0.0
          ExMLX.TestHelpers.assert_close([Nx.to_number(read)], [expected], 1.0e-5, "read")
        end
      end
    end

    test "a prompt's caches of many layers are stored as the loop holds them" do
      # 17 layers: 34 planned caches, more than an Erlang map keeps in key
      # order; each layer's prompt caches are read by its attention before
      # a later layer's are written. The values against Nx's own evaluator
      # on Nx.BinaryBackend.
      prompt = [[[[1.0, 0.5, -1.0], [0.25, 2.0, 0.0]], [[-0.5, 1.5, 1.0], [0.75, -1.0, 0.5]]]]
      query = [[[[1.0, -2.0, 0.5]], [[0.25, 3.0, -1.0]], [[0.0, 1.0, 1.0]], [[-1.0, 0.5, 2.0]]]]
      binary = fn l -> Nx.tensor(l, backend: Nx.BinaryBackend) end
      fun = &Funs.deep_decode(&1, &2, &3)

      expected =
        Nx.Defn.jit(fun, compiler: Nx.Defn.Evaluator).(binary.(prompt), binary.(query), 3)

      for fuse <- [true, false] do
        jit = Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu, fuse: fuse)
        got = jit.(cpu(prompt), cpu(query), 3) |> Nx.to_flat_list()
        ExMLX.TestHelpers.assert_close(got, Nx.to_flat_list(expected), 1.0e-5, "outputs")
      end
    end

    test "a cache of zeros enters the loop made as the loop stores it" do
      query = [[[[1.0, -2.0, 0.5]], [[0.25, 3.0, -1.0]], [[0.0, 1.0, 1.0]], [[-1.0, 0.5, 2.0]]]]
      fun = &Funs.zeros_decode/2
      binary = Nx.tensor(query, backend: Nx.BinaryBackend)
      expected = Nx.Defn.jit(fun, compiler: Nx.Defn.Evaluator).(binary, 5)

      for fuse <- [true, false] do
        jit = Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu, fuse: fuse)
        got = jit.(cpu(query), 5) |> Nx.to_flat_list()
        ExMLX.TestHelpers.assert_close(got, Nx.to_flat_list(expected), 1.0e-5, "outputs")
      end

      # the zeros (12 KiB, made at each run) made heads-first at the two
      # key/value heads, not in Nx's layout at four heads, then sliced and
      # transposed
      made = fn fuse ->
        {_device, _inputs, _constants, instructions, _outputs} = program_spec(fun, fuse)
        for {:full, _inputs, [_value, _type, shape, _device], _, _} <- instructions, do: shape
      end

      assert {made.(true), made.(false)} == {[{1, 2, 256, 3}], [{1, 256, 4, 3}]}
    end

    test "a cache given whole keeps every head, its heads not known to repeat" do
      # four distinct heads at the prompt's positions
      prompt = for p <- 0..1, do: for(h <- 0..3, do: for(d <- 0..2, do: (p - h + d) / 2))
      cache = prompt ++ List.duplicate(List.duplicate([0.0, 0.0, 0.0], 4), 3)
      query = [[1.0, -2.0, 0.5], [0.25, 3.0, -1.0], [0.0, 1.0, 1.0], [-1.0, 0.5, 2.0]]
      {expected_out, expected_read} = grouped_expected(prompt, query, 3)
      fun = &Funs.grouped_steps(&1, &2, &3, slice_read: true)

      for fuse <- [true, false] do
        jit = Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu, fuse: fuse)
        {out, read} = jit.(cpu([cache]), cpu([Enum.map(query, &[&1])]), 3)
        got = Nx.to_flat_list(out)
        ExMLX.TestHelpers.assert_close(got, List.flatten(expected_out), 1.0e-5, "outputs")
        ExMLX.TestHelpers.assert_close([Nx.to_number(read)], [expected_read], 1.0e-5, "read")
      end
    end

    test "the plan holds repeated heads once, or all with grouped: false" do
      prompt = Nx.iota({1, 2, 2, 3}, type: :f32)
      query = Nx.iota({1, 4, 1, 3}, type: :f32)
      expr = Nx.Defn.debug_expr(&Funs.grouped_decode/3).(prompt, query, 2)

      # the loop's state: cache, i, out, read, query, steps
      [initial, arg, pred, body] = find_loop(expr).data.args
      plan = ExMLX.Compiler.CacheLayout.plan(initial, arg, pred, body)
      assert plan.leaves == %{0 => 2}
      plan = ExMLX.Compiler.CacheLayout.plan(initial, arg, pred, body, grouped: false)
      assert plan.leaves == %{0 => 1}
    end

    # the `while` of `expr`'s outputs (a tuple of two)
    defp find_loop({out, _read}) do
      %Nx.Tensor{data: %Nx.Defn.Expr{op: :elem, args: [tuple, _]}} = out
      %Nx.Tensor{data: %Nx.Defn.Expr{op: :while}} = tuple
      tuple
    end

    test "a step writes the source of repeated heads, not the repeat" do
      fun = &Funs.grouped_decode(&1, &2, &3, slice_read: false)

      prompt =
        cpu([[[[1.0, 0.5, -1.0], [0.25, 2.0, 0.0]], [[-0.5, 1.5, 1.0], [0.75, -1.0, 0.5]]]])

      query = Nx.iota({1, 4, 1, 3}, type: :f32, backend: {ExMLX.Backend, device: :cpu})

      for fuse <- [true, false] do
        Nx.Defn.jit(fun, compiler: ExMLX.Compiler, device: :cpu, fuse: fuse).(prompt, query, 2)
      end

      broadcasts = fn fuse -> fun |> loop_ops(fuse) |> Enum.count(&(&1 == :broadcast_to)) end
      assert {broadcasts.(true), broadcasts.(false)} == {0, 1}
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
