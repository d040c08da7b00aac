defmodule ExMLX.OnCallerTest do
  # Small work run on the calling thread instead of the CPU worker
  # (ex_mlx_core::worker::run_on_caller; docs/decisions/0010). By default a
  # caller does so only when other processes take the machine's cores; these
  # tests force the choice (a test hook) and so run alone.
  use ExUnit.Case, async: false

  alias ExMLX.{Call, Native}

  setup do
    on_exit(fn -> Native.set_callers_run_for_test(:when_crowded) end)
  end

  defp runs, do: Native.runs_on_caller_for_test()

  # `fun.()`'s result, with how many runs on a calling thread it made, from
  # the first of up to 10 attempts where `good?.(runs)`: a job another
  # test's process queued meanwhile (a caller runs work only while the
  # worker has none) sends an attempt's ops to the worker, and another
  # process's small work may run on its own calling thread.
  defp attempts(good?, fun) do
    Enum.reduce_while(1..10, nil, fn _, _ ->
      callers_run(:always)
      before = runs()
      result = fun.()
      made = runs() - before

      if good?.(made) do
        {:halt, {result, made}}
      else
        Process.sleep(5)
        {:cont, {result, made}}
      end
    end)
  end

  # At least `least` of its calls ran on the calling thread (a creation of
  # no input may be computed by ExMLX's CPU kernels instead, with no MLX).
  defp on_caller(least, fun), do: attempts(&(&1 >= least), fun)

  # None of it ran on a calling thread.
  defp off_caller(fun), do: attempts(&(&1 == 0), fun)

  # Sets the mode once the worker has nothing queued: a caller runs work only
  # while the worker has none (arrays the garbage collector released are
  # dropped by a job of the worker's), so the test's first op is not sent to
  # the worker for a job it did not queue.
  defp callers_run(mode) do
    :erlang.garbage_collect()
    Native.set_callers_run_for_test(:never)
    ExMLX.iota({:s, 32}, {2}) |> ExMLX.to_binary()
    Native.set_callers_run_for_test(mode)
  end

  # `(i + i) * i - 3` for i in 0..n-1, as s32, by ExMLX; and the same by Elixir.
  # (x is not evaluated: no op of the chain is one the host computes from
  # computed inputs, ExMLX.cpu_kernels?/0)
  defp chain(n) do
    x = ExMLX.iota({:s, 32}, {n})
    x |> ExMLX.add(x) |> ExMLX.multiply(x) |> ExMLX.subtract(ExMLX.full(3, {:s, 32}, {}))
  end

  defp expected(n), do: for(i <- 0..(n - 1), into: <<>>, do: <<2 * i * i - 3::signed-32-little>>)

  test "small ops and reads run on the calling thread and give the worker's results" do
    # the creation, the chain's three ops and the read (the scalar may be
    # the CPU kernels')
    {on_caller, made} = on_caller(5, fn -> chain(1000) |> ExMLX.to_binary() end)
    assert made >= 5
    assert on_caller == expected(1000)

    callers_run(:never)
    before = runs()
    on_worker = chain(1000) |> ExMLX.to_binary()
    assert runs() == before
    assert on_worker == on_caller

    # floats: the same MLX kernels either way, so the same bits
    floats = fn ->
      ExMLX.iota({:f, 32}, {4096})
      |> ExMLX.divide(ExMLX.full(7.0, {:f, 32}, {}))
      |> ExMLX.exp()
      |> ExMLX.sin()
      |> ExMLX.sum()
      |> ExMLX.to_binary()
    end

    {floats_on_caller, made} = on_caller(6, floats)
    assert made >= 6
    callers_run(:never)
    assert floats.() == floats_on_caller
  end

  test "work of more elements than a caller may compute goes to the worker" do
    n = 100_000
    x = ExMLX.full(1, {:s, 32}, {n}) |> ExMLX.eval()
    # reading two inputs of 100,000 elements is past the calling thread's share
    {sum, made} = off_caller(fn -> ExMLX.add(x, x) |> ExMLX.sum() |> ExMLX.item() end)
    assert made == 0
    assert sum == 2 * n
  end

  test "a result of an op that is not of linear cost is read on the worker" do
    a = ExMLX.iota({:f, 32}, {4, 4}) |> ExMLX.eval()
    {got, made} = off_caller(fn -> ExMLX.matmul(a, a) |> ExMLX.to_binary() end)
    assert made == 0
    # row i of a is 4i .. 4i+3; (a·a)[0][0] = 0·0 + 1·4 + 2·8 + 3·12
    <<first::float-32-little, _::binary>> = got
    assert first == 56.0
  end

  test "an error of an op run on the calling thread is raised where its result is used" do
    # the reshape is refused when its node is built: the deferred result
    # holds the error
    {ref, made} =
      on_caller(2, fn ->
        t = ExMLX.iota({:s, 32}, {16})
        {ref, :cpu} = ExMLX.Call.deferred(Native.op({:deferred, :any}, :reshape, [t.ref], [{7}]))
        ref
      end)

    # the creation and the reshape
    assert made >= 2
    error = assert_raise ExMLX.Error, fn -> ExMLX.Call.run(&Native.eval(&1, ref)) end
    assert error.message == "shape: cannot reshape {16} (16 elements) to {7} (7 elements)"
  end

  # A program computing sum(2 · exp(x)): straight-line ops of linear cost.
  defp exp_sum do
    instructions = [
      {:exp, [0], [], :any, 1},
      {:add, [1, 1], [], :any, 1},
      {:sum, [2], [nil, false], :any, 1}
    ]

    Native.program_new(:cpu, 1, [], instructions, [3], false)
  end

  # A call's one float32 output, of `shape`.
  defp start(program, inputs, shape \\ {}) do
    [out] = Native.program_start(program, Enum.map(inputs, & &1.ref), [{:f, 32}]) |> Call.value()
    %ExMLX.Tensor{ref: out, shape: shape, type: {:f, 32}, device: :cpu}
  end

  test "a call of a small program of linear ops runs on the calling thread once its work is known" do
    program = exp_sum()
    x = ExMLX.iota({:f, 32}, {16}) |> ExMLX.divide(ExMLX.full(8.0, {:f, 32}, {})) |> ExMLX.eval()

    # the first call measures the program's work, on the worker
    callers_run(:never)
    before = runs()
    on_worker = start(program, [x]) |> ExMLX.to_binary()
    assert runs() == before

    # the call, and the read of its computed output
    {on_caller, made} = on_caller(1, fn -> start(program, [x]) |> ExMLX.to_binary() end)
    assert made >= 1
    # the same MLX kernels on the same stream: the same bits
    assert on_caller == on_worker

    <<got::float-32-little>> = on_caller
    expected = Enum.sum(for i <- 0..15, do: 2 * :math.exp(i / 8))
    assert_in_delta got, expected, expected * 1.0e-6
  end

  test "programs of unknown or large work run on the worker" do
    # a product grows faster than the elements it reads
    a = ExMLX.iota({:f, 32}, {4, 4}) |> ExMLX.eval()
    product = Native.program_new(:cpu, 1, [], [{:matmul, [0, 0], [], :any, 1}], [1], false)
    start(product, [a], {4, 4}) |> ExMLX.to_binary()
    {got, made} = off_caller(fn -> start(product, [a], {4, 4}) |> ExMLX.to_binary() end)
    assert made == 0
    # (a·a)[0][0] = 0·0 + 1·4 + 2·8 + 3·12
    <<first::float-32-little, _::binary>> = got
    assert first == 56.0

    # 100,000 inputs and as many of each op's results: past a caller's share
    large = ExMLX.full(0.0, {:f, 32}, {100_000}) |> ExMLX.eval()
    program = exp_sum()
    start(program, [large]) |> ExMLX.to_binary()
    {total, made} = off_caller(fn -> start(program, [large]) |> ExMLX.item() end)
    assert made == 0
    assert total == 200_000.0

    # a call on inputs of other shapes than the measured run's is not known
    small = ExMLX.iota({:f, 32}, {3}) |> ExMLX.eval()
    {total, made} = off_caller(fn -> start(program, [small]) |> ExMLX.item() end)
    assert made == 0
    assert_in_delta total, 2 * (1 + :math.exp(1) + :math.exp(2)), 1.0e-4
  end

  test "an error of a program run on the calling thread is raised where its outputs are read" do
    program = exp_sum()
    x = ExMLX.iota({:f, 32}, {16}) |> ExMLX.eval()
    callers_run(:never)
    start(program, [x]) |> ExMLX.to_binary()
    held = ExMLX.iota({:s, 32}, {100_000}) |> ExMLX.eval()

    # (the limit is set after `on_caller` readied the worker, which makes a tensor)
    {out, made} =
      on_caller(1, fn ->
        old = ExMLX.Memory.set_memory_limit(1024)

        try do
          start(program, [x])
        after
          ExMLX.Memory.set_memory_limit(old)
        end
      end)

    assert made >= 1
    error = assert_raise ExMLX.Error, fn -> ExMLX.to_binary(out) end
    assert error.kind == :out_of_memory
    assert error.message =~ "memory limit of 1024 bytes"
    assert ExMLX.to_binary(held) |> byte_size() == 400_000
  end

  test "many processes running small work on their own threads each get their own results" do
    callers_run(:always)

    results =
      1..8
      |> Enum.map(fn k ->
        Task.async(fn ->
          base = ExMLX.iota({:s, 32}, {16}) |> ExMLX.eval()

          for i <- 1..200 do
            base |> ExMLX.add(ExMLX.full(k * 1000 + i, {:s, 32}, {})) |> ExMLX.to_binary()
          end
        end)
      end)
      |> Task.await_many(:infinity)

    for {got, k} <- Enum.with_index(results, 1), {binary, i} <- Enum.with_index(got, 1) do
      assert binary == for(j <- 0..15, into: <<>>, do: <<j + k * 1000 + i::signed-32-little>>)
    end
  end
end
