defmodule ExMLX.ConcurrencyTest do
  use ExUnit.Case, async: false

  import ExMLX.TestHelpers

  @processes 32
  @ops_per_process 200

  defp run_process(p, shared),
    do: mixed_ops(p, @ops_per_process, shared, f32(Enum.map(0..15, &(&1 * p * 0.5 - 3.0))))

  test "#{@processes} processes × #{@ops_per_process} mixed ops give the sequential results" do
    shared = f32(Enum.map(0..15, &(&1 * 1.25)))

    {sequential, concurrent} =
      sequential_and_concurrent(@processes, 60_000, &run_process(&1, shared))

    assert concurrent == sequential
  end

  test "a caller waiting for the worker holds no scheduler, and others keep running" do
    # The CPU worker is held busy by a test hook until released, so the
    # caller below (its `floor` needs the worker: ops the host computes on
    # computed tensors would not) cannot finish before the checks, however fast or loaded
    # the machine is. With one scheduler online, had the NIF blocked the
    # caller's scheduler, the probe process could not run until the release.
    a = ExMLX.full(2.0, {:f, 32}, {4}, device: :cpu) |> ExMLX.eval()
    hold = make_ref()
    :ok = ExMLX.Native.hold_worker_for_test(hold)
    online = :erlang.system_flag(:schedulers_online, 1)
    parent = self()

    try do
      caller =
        spawn_link(fn ->
          send(parent, {:result, ExMLX.add(a, a) |> ExMLX.floor() |> ExMLX.sum() |> ExMLX.item()})
        end)

      # The caller reaches its wait (in a receive) while the worker is held.
      assert ExMLX.TestHelpers.wait_for_status(caller, :waiting) == :waiting
      # Another process runs meanwhile, on the one scheduler.
      spawn_link(fn -> send(parent, :probe_ran) end)
      assert_receive :probe_ran, 120_000
      refute_received {:result, _}
      assert Process.info(caller, :status) == {:status, :waiting}
    after
      ExMLX.Native.release_worker_for_test()
      :erlang.system_flag(:schedulers_online, online)
    end

    # The held job reports it was released (not timed out), then the caller's
    # work runs and answers.
    assert_receive {^hold, {:ok, true}}, 120_000
    assert_receive {:result, 16.0}, 120_000
  end

  test "computed CPU tensors are read, made and encoded without the worker" do
    # With the CPU worker held busy, anything that needed it would wait; these
    # complete, so they ran on the calling thread (ExMLX.Call.copy_path/2).
    data = for i <- 0..999, into: <<>>, do: <<i::32-little>>
    computed = ExMLX.from_binary(data, {:u, 32}, {1000}, device: :cpu)
    evaluated = ExMLX.add(computed, computed) |> ExMLX.eval()
    lazy = ExMLX.add(computed, computed)
    hold = make_ref()
    :ok = ExMLX.Native.hold_worker_for_test(hold)
    parent = self()

    try do
      spawn_link(fn ->
        made = ExMLX.from_binary(data, {:u, 32}, {1000}, device: :cpu)
        frame = ExMLX.Wire.encode(evaluated)
        decoded = ExMLX.Wire.decode!(ExMLX.Wire.encode(made), device: :cpu)

        send(
          parent,
          {:done, ExMLX.to_binary(made), ExMLX.eval(evaluated), frame, ExMLX.to_binary(decoded),
           ExMLX.to_binary(evaluated)}
        )
      end)

      assert_receive {:done, ^data, ^evaluated, frame, ^data, doubled}, 120_000
      assert doubled == for(i <- 0..999, into: <<>>, do: <<2 * i::32-little>>)
      assert binary_part(frame, byte_size(frame), -4000) == doubled

      # a lazy tensor does need the worker: its read waits for the release
      reader = Task.async(fn -> ExMLX.to_binary(lazy) end)
      refute Task.yield(reader, 100)
      ExMLX.Native.release_worker_for_test()
      assert Task.await(reader, :infinity) == doubled
    after
      ExMLX.Native.release_worker_for_test()
    end

    assert_receive {^hold, {:ok, true}}, 120_000
  end

  @tag :cpu_kernels
  test "exactly rounded element-wise ops of computed float32 CPU tensors run without the worker" do
    # ex_mlx_core::cpu_kernels: with the CPU worker held busy, these
    # complete, so they ran on the calling thread. The expected values are
    # worked out by hand (IEEE float32: every one is exact; to_list is flat).
    f32 = fn values -> for v <- values, into: <<>>, do: <<v::float-32-little>> end
    a = ExMLX.from_binary(f32.([1.0, -2.0, 3.5, 0.25, 8.0, -0.5]), {:f, 32}, {2, 3}, device: :cpu)
    row = ExMLX.from_binary(f32.([0.5, 4.0, -1.0]), {:f, 32}, {3}, device: :cpu)
    # (a view MLX has not computed: not known to be computed)
    lazy = a |> ExMLX.reshape({6}) |> ExMLX.reshape({2, 3})
    # ExMLX.Prediction reads MLX's type rules with the first call of each
    # op, on the worker: make those calls before holding it
    for op <- [&ExMLX.add/2, &ExMLX.multiply/2, &ExMLX.max/2], do: op.(a, row) |> ExMLX.eval()
    ExMLX.negate(row) |> ExMLX.eval()
    hold = make_ref()
    :ok = ExMLX.Native.hold_worker_for_test(hold)
    parent = self()

    try do
      spawn_link(fn ->
        shifted = ExMLX.add(a, row)
        product = ExMLX.multiply(shifted, row)
        capped = ExMLX.max(product, ExMLX.negate(row))

        send(
          parent,
          {:done, ExMLX.to_list(shifted), ExMLX.to_list(product), ExMLX.to_list(capped)}
        )
      end)

      assert_receive {:done, shifted, product, capped}, 120_000
      assert shifted == [1.5, 2.0, 2.5, 0.75, 12.0, -1.5]
      assert product == [0.75, 8.0, -2.5, 0.375, 48.0, 1.5]
      # max(product, [-0.5, -4.0, 1.0])
      assert capped == [0.75, 8.0, 1.0, 0.375, 48.0, 1.5]

      # an input that is not computed yet needs the worker: the op waits
      reader = Task.async(fn -> ExMLX.add(lazy, row) |> ExMLX.to_list() end)
      refute Task.yield(reader, 100)
      ExMLX.Native.release_worker_for_test()
      assert Task.await(reader, :infinity) == [1.5, 2.0, 2.5, 0.75, 12.0, -1.5]
    after
      ExMLX.Native.release_worker_for_test()
    end

    assert_receive {^hold, {:ok, true}}, 120_000
  end

  # A NIF waits briefly for an idle worker: quick work comes back as the
  # NIF's own {:ok, value}, long work as a message. Both must be right.
  defp call_eval(ref) do
    tag = make_ref()

    case ExMLX.Native.eval(tag, ref) |> ExMLX.Call.unhint() do
      {:ok, :ok} ->
        :returned

      :ok ->
        receive do
          {^tag, {:ok, :ok}} -> :message
        after
          10_000 -> flunk("no reply")
        end
    end
  end

  test "replies come back directly for quick work and as messages for long work" do
    # (on the CPU: its f32 matmul is exact here; a GPU's is TF32)
    one = ExMLX.full(1.0, {:f, 32}, {}, device: :cpu) |> ExMLX.eval()
    quick = for _ <- 1..200, do: call_eval(one.ref)
    assert :returned in quick

    a = ExMLX.full(1.0e-3, {:f, 32}, {1024, 1024}, device: :cpu)
    long = Enum.reduce(1..4, a, fn _, acc -> ExMLX.matmul(acc, a) end)
    assert call_eval(long.ref) == :message
    # every element of a^5 is 1024^4 · (1e-3)^5
    assert_in_delta ExMLX.slice(long, [0, 0], [1, 1]) |> ExMLX.item(), 1024 ** 4 * 1.0e-15, 1.0e-7
    # nothing left over in the mailbox
    refute_received _
  end

  test "a tensor outlives the process that made it" do
    parent = self()
    spawn(fn -> send(parent, {:tensor, f32([1.0, 2.0])}) end)
    t = receive do: ({:tensor, t} -> t)
    :erlang.garbage_collect()
    assert ExMLX.add(t, t) |> ExMLX.to_list() == [2.0, 4.0]
  end
end

defmodule ExMLX.DeferredTest do
  # Deferred mode (used by the Nx backend): the NIF returns a tensor at once,
  # the worker fills it; errors surface where the tensor is used.
  use ExUnit.Case, async: true

  alias ExMLX.{Call, Native}

  test "a deferred op fills its tensor, cast to the requested type" do
    t = ExMLX.iota({:s, 32}, {4}, device: :cpu)
    {ref, :cpu} = ExMLX.Op.defer(:less, [t.ref, t.ref], [], {:u, 8})
    # comparisons give :bool in MLX; deferred mode cast it to u8
    assert {{4}, {:u, 8}, :cpu} = Call.info(ref)
    assert Call.run(&Native.to_binary(&1, ref)) == <<0, 0, 0, 0>>
  end

  test "chains of deferred ops on one worker run in order" do
    one = ExMLX.full(1, {:s, 64}, {})

    ref =
      Enum.reduce(1..500, one.ref, fn _, acc ->
        {r, _} = ExMLX.Op.defer(:add, [acc, one.ref], [], {:s, 64})
        r
      end)

    assert Call.run(&Native.item(&1, ref)) == 501
  end

  test "an error inside a deferred op is raised where the tensor is used" do
    t = ExMLX.iota({:f, 32}, {2, 2})
    {bad, _} = ExMLX.Op.defer(:sum, [t.ref], [[5], false], {:f, 32})

    assert_raise ExMLX.Error, ~r/axes: axis 5 is out of range/, fn ->
      Call.run(&Native.to_binary(&1, bad))
    end

    # an op on a tensor known to have failed is refused at the call
    assert_raise ExMLX.Error, ~r/axis 5 is out of range/, fn ->
      ExMLX.Op.defer(:negate, [bad], [], {:f, 32})
    end

    # one queued while its input is (maybe) still pending gets the error
    # either at the call or where its own result is used
    {pending, _} = ExMLX.Op.defer(:sum, [t.ref], [[5], false], {:f, 32})

    error =
      try do
        {later, _} = ExMLX.Op.defer(:negate, [pending], [], {:f, 32})
        Call.info(later)
      rescue
        e in ExMLX.Error -> e
      end

    assert %ExMLX.Error{message: message} = error
    assert message =~ "axis 5 is out of range"
  end

  test "operations without a one-tensor result refuse deferred mode" do
    t = ExMLX.iota({:f, 32}, {2})
    {ref, _} = Call.defer(&Native.to_binary(&1, t.ref), {:f, 32})
    assert_raise ExMLX.Error, ~r/no deferred form/, fn -> Call.info(ref) end
  end
end
