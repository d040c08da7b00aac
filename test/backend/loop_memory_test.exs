if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.LoopMemoryTest do
    # The memory a compiled `while` loop holds while it runs: a large state
    # is evaluated at every step (ex_mlx_core's program::run,
    # EVAL_STATE_BYTES), so MLX can update it in place and free what a step
    # replaced, even where the loop's condition needs no evaluation; and a
    # large tensor a program makes from nothing (zeros to write a cache
    # into) is made at each run, not kept as the program's constant
    # (ExMLX.Op.defer_created/5).
    use ExUnit.Case, async: false

    import Nx.Defn

    @steps 50
    @shape {1, 20_000, 4, 8}
    # bytes of the f32 state written into
    @state_bytes 20_000 * 4 * 8 * 4

    # writes one row a step into `cache` and reads the updated cache in a
    # layout of its own (as attention reads a key/value cache)
    defn write_and_read(cache, row) do
      {cache, _row, _i, total} =
        while {cache, row, i = 0, total = 0.0}, i < @steps do
          cache = Nx.put_slice(cache, [0, i, 0, 0], row * (i + 1))
          read = Nx.transpose(cache, axes: [0, 2, 1, 3])[[0, 0, 0..3, 0]]
          {cache, row, i + 1, total + Nx.sum(read)}
        end

      {cache, total}
    end

    test "a fixed-count loop reading its large state at every step holds one copy of it" do
      {written, total, extra} = profiled_run(&write_and_read/2)

      # row i (from 0) holds i + 1; step i reads rows 0..3 of head 0, depth 0
      # of the cache it has written: the first min(i + 1, 4) rows
      expected = Enum.sum(for i <- 0..(@steps - 1), k <- 0..min(i, 3), do: k + 1)
      assert written == @steps * 1.0
      assert total == expected * 1.0

      # the state once, at most one more copy of it while a step writes,
      # and a step's small arrays (the row, the read, the total: under
      # 64 KiB with an allocator's rounding); before, each step between
      # evaluations kept a copy of its own (10 to 15 states)
      assert extra <= 2 * @state_bytes + 64 * 1024
    end

    # `{written, total, extra}` of a call of `fun` compiled, on a state of
    # zeros computed before the call and a row of ones, after a first call
    # that traces and compiles: the last value of the last row written,
    # the total, and the peak above the call's start
    defp profiled_run(fun) do
      row = Nx.broadcast(Nx.tensor(1.0, backend: ExMLX.Backend), {1, 1, 4, 8})
      fresh = fn -> Nx.broadcast(Nx.tensor(0.0, backend: ExMLX.Backend), @shape) |> Nx.add(0) end
      run = Nx.Defn.jit(fun, compiler: ExMLX.Compiler)

      run.(fresh.(), row)
      cache = fresh.()
      0.0 = Nx.to_number(cache[[0, 0, 0, 0]])
      :erlang.garbage_collect()

      {{written, total}, report} =
        ExMLX.Memory.profile(fn ->
          {written, total} = run.(cache, row)
          {Nx.to_number(written[[0, @steps - 1, 3, 7]]), Nx.to_number(total)}
        end)

      {written, total, report.peak - report.active_before}
    end

    # as write_and_read/2, a branch on the read deciding what the step
    # adds: the program reads the branch's predicate from MLX, which
    # evaluates the step's write before the step ends
    defn write_then_branch(cache, row) do
      {cache, _row, _i, total} =
        while {cache, row, i = 0, total = 0.0}, i < @steps do
          cache = Nx.put_slice(cache, [0, i, 0, 0], row * (i + 1))
          read = Nx.sum(Nx.transpose(cache, axes: [0, 2, 1, 3])[[0, 0, 0..3, 0]])
          added = if read > 5.0, do: read, else: -read
          {cache, row, i + 1, total + added}
        end

      {cache, total}
    end

    test "a write into the state evaluated before its step ends is made in place" do
      {written, total, extra} = profiled_run(&write_then_branch/2)

      # step i reads the sum of the first min(i + 1, 4) rows written (row
      # k holding k + 1): 1, 3, 6, then 10; it adds that sum above 5, its
      # negation otherwise
      sums = for i <- 0..(@steps - 1), do: Enum.sum(for k <- 0..min(i, 3), do: k + 1)
      expected = Enum.sum(for s <- sums, do: if(s > 5, do: s, else: -s))
      assert written == @steps * 1.0
      assert total == expected * 1.0

      # the state once: the step's write takes over the state's buffer
      # (the state's slot has no reference once the write has read it),
      # and a step's small arrays; beside the state's own reference, the
      # write would copy the state at every step
      assert extra <= @state_bytes + 64 * 1024
    end

    # a prompt's pass writing rows into a cache of zeros the function makes
    # (Bumblebee's key/value caches), then a loop writing one row a step
    defn prompt_then_loop(prompt, row) do
      cache = Nx.put_slice(Nx.broadcast(0.0, @shape), [0, 0, 0, 0], prompt)

      {_cache, _row, _i, total} =
        while {cache, row, i = 8, total = 0.0}, i < 8 + @steps do
          cache = Nx.put_slice(cache, [0, i, 0, 0], row * (i + 1))
          read = Nx.transpose(cache, axes: [0, 2, 1, 3])[[0, 0, 0..15, 0]]
          {cache, row, i + 1, total + Nx.sum(read)}
        end

      total
    end

    for fuse <- [false, true] do
      test "a cache of zeros made by the function is held by no program, and written in place (fuse: #{fuse})" do
        prompt = Nx.broadcast(Nx.tensor(1.0, backend: ExMLX.Backend), {1, 8, 4, 8})
        row = Nx.broadcast(Nx.tensor(1.0, backend: ExMLX.Backend), {1, 1, 4, 8})
        run = Nx.Defn.jit(&prompt_then_loop/2, compiler: ExMLX.Compiler, fuse: unquote(fuse))

        # step i (from 8) reads rows 0..15 of head 0, depth 0: the prompt's
        # eight 1.0s and the rows written so far, row k holding k + 1
        expected =
          Enum.sum(for i <- 8..(7 + @steps), k <- 8..min(i, 15)//1, do: k + 1) + 8 * @steps

        settled = fn ->
          :erlang.garbage_collect()
          0 = ExMLX.full(0, {:u, 8}, {}) |> ExMLX.item()
          ExMLX.Memory.stats().active
        end

        start = settled.()
        assert Nx.to_number(run.(prompt, row)) == expected * 1.0

        # the first call traced and compiled: what its program holds now
        # is the program's constants, none of them the cache (a constant
        # of zeros made once would be, and each call would copy it)
        assert settled.() - start <= 64 * 1024

        {total, report} = ExMLX.Memory.profile(fn -> Nx.to_number(run.(prompt, row)) end)
        assert total == expected * 1.0
        # the cache once (MLX writes the prompt's rows into the zeros and
        # each step's row into the state in place), and a step's small
        # arrays
        assert report.peak - report.active_before <= @state_bytes + 64 * 1024
      end
    end
  end
end
