defmodule ExMLX.MemoryTest do
  # Not async: MLX's figures are process-wide.
  use ExUnit.Case, async: false
  doctest ExMLX.Memory

  alias ExMLX.Memory
  import ExMLX.TestHelpers, only: [settle: 0, settle_to: 2]

  @mb 1024 * 1024

  # Evaluated 64 MB tensor owned by a fresh process; returns {pid, active while alive}.
  defp allocate_in_process(bytes) do
    parent = self()

    pid =
      spawn(fn ->
        # iota materialises every element (a full of one value stays a broadcast)
        t = ExMLX.iota({:f, 32}, {div(bytes, 4)})
        ExMLX.eval(t)
        send(parent, {:allocated, Memory.stats().active})

        receive do
          :drop -> :ok
        end
      end)

    active = receive do: ({:allocated, a} -> a)
    {pid, active}
  end

  test "a 64 MB tensor raises active memory by 64 MB, and dropping it gives it back" do
    settle()
    baseline = Memory.stats().active
    {pid, active} = allocate_in_process(64 * @mb)
    assert active - baseline >= 64 * @mb

    ref = Process.monitor(pid)
    send(pid, :drop)
    receive do: ({:DOWN, ^ref, _, _, _} -> :ok)

    assert settle_to(baseline, @mb) - baseline <= @mb
  end

  test "reset_peak brings the peak down to the current active memory" do
    {pid, _} = allocate_in_process(16 * @mb)
    send(pid, :drop)
    settle()
    assert Memory.stats().peak >= 16 * @mb
    :ok = Memory.reset_peak()
    stats = Memory.stats()
    assert stats.peak <= stats.active + @mb
  end

  test "limits read back what was set and return the previous value" do
    old_memory = Memory.set_memory_limit(3_000_000_000)
    assert Memory.stats().memory_limit == 3_000_000_000
    assert Memory.set_memory_limit(old_memory) == 3_000_000_000

    old_cache = Memory.set_cache_limit(123 * @mb)
    assert Memory.stats().cache_limit == 123 * @mb
    assert Memory.set_cache_limit(old_cache) == 123 * @mb
  end

  test "the start keeps MLX's own cache limit, raised where it is small" do
    raised = min(div(Memory.stats().memory_limit, 4), 1024 * @mb)

    if ExMLX.device_available?(:gpu) do
      # MLX's GPU allocators size their cache from the device's memory
      assert Memory.mlx_cache_limit() > raised
      assert Memory.default_cache_limit() == Memory.mlx_cache_limit()
    else
      # MLX's CPU allocator keeps 32 MB of freed buffers
      assert Memory.mlx_cache_limit() == 32 * @mb
      assert Memory.default_cache_limit() == raised
    end

    # what the application set at start (test config sets no :cache_limit)
    assert Memory.stats().cache_limit == Memory.default_cache_limit()

    # a new limit leaves MLX's own as it was
    mlx = Memory.mlx_cache_limit()
    old_cache = Memory.set_cache_limit(7 * @mb)
    assert Memory.mlx_cache_limit() == mlx
    assert Memory.set_cache_limit(old_cache) == 7 * @mb
  end

  test "a memory limit below current use is accepted: held tensors stay, new ones are refused" do
    {pid, _} = allocate_in_process(8 * @mb)
    held = ExMLX.iota({:s, 32}, {1000}) |> ExMLX.eval()
    old = Memory.set_memory_limit(1024)

    try do
      # reading and viewing what exists needs no new buffer
      assert ExMLX.to_binary(held) |> byte_size() == 4000
      assert ExMLX.reshape(held, {10, 100}) |> ExMLX.shape() == {10, 100}

      error =
        assert_raise ExMLX.Error, fn ->
          ExMLX.full(2.0, {:f, 32}, {1000}) |> ExMLX.multiply(ExMLX.full(3.0, {:f, 32}, {}))
        end

      assert error.kind == :out_of_memory
      assert error.message =~ "memory limit of 1024 bytes"
    after
      Memory.set_memory_limit(old)
      send(pid, :drop)
    end

    t = ExMLX.full(2.0, {:f, 32}, {1000}) |> ExMLX.multiply(ExMLX.full(3.0, {:f, 32}, {}))
    assert ExMLX.sum(t) |> ExMLX.item() == 6000.0
  end

  test "clear_cache works with and without anything cached" do
    :ok = Memory.clear_cache()
    :ok = Memory.clear_cache()
    assert Memory.stats().cache == 0
  end

  test "bad arguments are errors that name them" do
    assert_raise ArgumentError, ~r/memory_limit must be a non-negative integer/, fn ->
      Memory.set_memory_limit(-1)
    end

    assert_raise ArgumentError, ~r/cache_limit must be a non-negative integer/, fn ->
      Memory.set_cache_limit(1.5)
    end

    assert_raise ArgumentError, ~r/interval_ms must be a positive integer/, fn ->
      Memory.start_monitor(0)
    end

    assert_raise ArgumentError, ~r/collect_after must be a non-negative integer/, fn ->
      Memory.set_collect_after(:never)
    end

    assert {:error,
            {:argument,
             "limit: expected :memory_limit, :cache_limit or :collect_after, got: :other"}} =
             ExMLX.Native.memory_set_limit(:other, 1)
  end

  # How much active memory a process that makes `count` 1 MB tensors and
  # drops each one holds at the end: its heap is large enough that it never
  # collects garbage by itself meanwhile.
  defp held_after_dropping(count) do
    parent = self()

    {pid, ref} =
      :erlang.spawn_opt(
        fn ->
          before = Memory.stats().active
          for _ <- 1..count, do: ExMLX.iota({:u, 8}, {@mb}) |> ExMLX.eval()
          # (a later call: the worker drops what was released before it)
          ExMLX.iota({:u, 8}, {1}) |> ExMLX.eval()
          send(parent, {:held, Memory.stats().active - before})
        end,
        [:monitor, min_heap_size: 8_000_000]
      )

    held = receive do: ({:held, held} -> held)
    receive do: ({:DOWN, ^ref, :process, ^pid, _} -> :ok)
    settle()
    held
  end

  test "with a hint due on every reply, each way of making a tensor still gives it" do
    previous = Memory.set_collect_after(1)

    try do
      # (128 KB: a CPU frame or binary this size goes through the worker)
      bytes = :binary.copy(<<7>>, 128 * 1024)
      t = ExMLX.from_binary(bytes, {:u, 8}, {128 * 1024})
      assert ExMLX.to_binary(t) == bytes
      assert t |> ExMLX.Wire.encode() |> ExMLX.Wire.decode!() |> ExMLX.to_binary() == bytes
      small = ExMLX.iota({:s, 32}, {4})

      assert small |> ExMLX.Wire.encode() |> ExMLX.Wire.decode!() |> ExMLX.to_list() == [
               0,
               1,
               2,
               3
             ]

      assert ExMLX.add(small, small) |> ExMLX.sum() |> ExMLX.item() == 12
      assert ExMLX.cumulative_sum(small) |> ExMLX.eval() |> ExMLX.to_list() == [0, 1, 3, 6]
    after
      Memory.set_collect_after(previous)
    end
  end

  test "a process that drops large tensors collects them every collect_after bytes" do
    settle()
    previous = Memory.set_collect_after(4 * @mb)

    try do
      # hints: the process collects its garbage every 4 MB of new tensors
      assert held_after_dropping(64) < 16 * @mb
      # no hints: all 64 dropped tensors are still there at the end
      assert Memory.set_collect_after(0) == 4 * @mb
      assert held_after_dropping(64) >= 64 * @mb
    after
      Memory.set_collect_after(previous)
    end
  end

  test "profile reports a peak at least the allocation inside it, and nests" do
    {result, outer} =
      Memory.profile(:outer, fn ->
        {_, inner} =
          Memory.profile(:inner, fn ->
            ExMLX.iota({:f, 32}, {4 * @mb}) |> ExMLX.eval()
          end)

        assert inner.peak >= 16 * @mb
        :done
      end)

    assert result == :done
    assert outer.label == :outer
    # the inner profile reset MLX's peak; the outer still sees the allocation
    assert Memory.stats().peak >= 16 * @mb
    assert is_integer(outer.wall_us) and outer.wall_us >= 0
  end

  test "the monitor's samples: every one it announced, in order, then it stops" do
    {:ok, monitor} = Memory.start_monitor(1, notify: self())

    announced =
      for _ <- 1..5 do
        assert_receive {:ex_mlx_memory_sample, ^monitor, sample}, 120_000
        sample
      end

    samples = Memory.stop_monitor(monitor)
    # what it returns starts with what it announced (it may have taken more)
    assert Enum.take(samples, 5) == announced
    assert Enum.all?(samples, &match?(%{active: _, peak: _, cache: _, at_ms: _}, &1))
    at = Enum.map(samples, & &1.at_ms)
    assert at == Enum.sort(at)
    assert Memory.summary(samples) =~ "active"
    refute Process.alive?(monitor)
  end

  test "the monitor's cadence: samples are due at start + n × interval" do
    alias ExMLX.Memory.Monitor
    # on time: the next sample is one interval after the previous due time
    assert Monitor.delay(1_000, 3, 10, 1_021) == 9
    # a slow sample does not push the ones after it back
    assert Monitor.delay(1_000, 3, 10, 1_029) == 1
    # late (a busy scheduler): taken at once, and the next is due on the grid
    assert Monitor.delay(1_000, 3, 10, 1_045) == 0
    assert Monitor.delay(1_000, 5, 10, 1_046) == 4
  end

  test "start_monitor checks its options" do
    assert_raise ArgumentError, "notify: expected a pid, got: :me", fn ->
      Memory.start_monitor(10, notify: :me)
    end

    assert_raise ArgumentError, ~r/unknown keys \[:every\]/, fn ->
      Memory.start_monitor(10, every: 1)
    end
  end

  test "creating and dropping 10,000 small tensors leaks nothing" do
    settle()
    baseline = Memory.stats().active

    task =
      Task.async(fn ->
        for i <- 1..10_000 do
          t = ExMLX.iota({:s, 32}, {16}) |> ExMLX.add(ExMLX.full(i, {:s, 32}, {}))
          ExMLX.eval(t)
        end

        :ok
      end)

    assert Task.await(task, :infinity) == :ok
    assert settle_to(baseline, @mb) - baseline <= @mb
  end

  test "a sum computed on the calling thread is freed when collected, the worker held busy" do
    # `a + a` of a computed float32 tensor is computed on the calling
    # thread (ExMLX.cpu_kernels?/0); its array is freed where its last
    # reference goes, not queued for the worker, which the test hook holds
    # until released: so the process's exit gives its bytes back meanwhile.
    n = 16_384
    a = ExMLX.iota({:f, 32}, {n}, device: :cpu) |> ExMLX.eval()
    settle()
    baseline = Memory.stats().active
    parent = self()
    hold = make_ref()
    :ok = ExMLX.Native.hold_worker_for_test(hold)

    try do
      {pid, ref} =
        spawn_monitor(fn ->
          sum = ExMLX.add(a, a)
          <<first::binary-size(16), _::binary>> = ExMLX.to_binary(sum)
          send(parent, {:active, Memory.stats().active, :binary.copy(first)})
        end)

      assert_receive {:active, active, first}, 120_000

      assert first ==
               <<0.0::float-32-little, 2.0::float-32-little, 4.0::float-32-little,
                 6.0::float-32-little>>

      assert active - baseline >= 4 * n
      assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 120_000
      assert active_within(baseline, 4 * n, 120_000) - baseline < 4 * n
    after
      ExMLX.Native.release_worker_for_test()
    end
  end

  # Active memory once it is below `baseline + slack`, or after `wait_ms`
  # (no worker round trip: the worker may be held).
  defp active_within(baseline, slack, wait_ms) do
    active = Memory.stats().active

    if active - baseline < slack or wait_ms <= 0 do
      active
    else
      Process.sleep(10)
      active_within(baseline, slack, wait_ms - 10)
    end
  end

  test "device_info reports the host's memory for :cpu" do
    info = Memory.device_info(:cpu)
    assert info.memory_size > 0
  end
end
