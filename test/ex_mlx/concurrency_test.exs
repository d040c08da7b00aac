defmodule ExMLX.ConcurrencyTest do
  use ExUnit.Case, async: false

  import ExMLX.TestHelpers

  @processes 32
  @ops_per_process 200

  # One deterministic mixed op, chosen by `i`, on a shared and a private tensor.
  defp step(i, shared, private) do
    case rem(i, 8) do
      0 ->
        ExMLX.add(shared, private) |> ExMLX.sum() |> ExMLX.item()

      1 ->
        ExMLX.multiply(shared, private) |> ExMLX.reduce_max() |> ExMLX.item()

      2 ->
        ExMLX.matmul(ExMLX.reshape(shared, {4, 4}), ExMLX.reshape(private, {4, 4}))
        |> ExMLX.to_list()

      3 ->
        shared |> ExMLX.slice([i |> rem(16)], [16]) |> ExMLX.sum() |> ExMLX.item()

      4 ->
        ExMLX.to_binary(ExMLX.transpose(ExMLX.reshape(private, {2, 8})))

      5 ->
        ExMLX.from_binary(ExMLX.to_binary(shared), {:f, 32}, {16}) |> ExMLX.mean() |> ExMLX.item()

      6 ->
        ExMLX.argmax(ExMLX.subtract(private, shared)) |> ExMLX.item()

      7 ->
        ExMLX.iota({:s, 32}, {i + 1}) |> ExMLX.sum() |> ExMLX.item()
    end
  end

  defp private_tensor(p), do: f32(Enum.map(0..15, &(&1 * p * 0.5 - 3.0)))

  defp run_process(p, shared) do
    private = private_tensor(p)
    for i <- 1..@ops_per_process, do: step(i + p, shared, private)
  end

  test "#{@processes} processes × #{@ops_per_process} mixed ops give the sequential results" do
    shared = f32(Enum.map(0..15, &(&1 * 1.25)))
    sequential = for p <- 1..@processes, do: run_process(p, shared)

    concurrent =
      1..@processes
      |> Enum.map(fn p -> Task.async(fn -> run_process(p, shared) end) end)
      |> Task.await_many(60_000)

    assert concurrent == sequential
  end

  test "a caller waiting for a large matmul holds no scheduler, and others keep running" do
    n = 2048
    a = ExMLX.full(1.0e-3, {:f, 32}, {n, n})
    ExMLX.eval(ExMLX.add(a, a))
    parent = self()

    # One scheduler only: if the NIF computed on the caller's scheduler, the
    # ticker below could not run at all until the matmul finished.
    online = :erlang.system_flag(:schedulers_online, 1)

    try do
      ticker = spawn_link(fn -> send(parent, {:ticks, tick([])}) end)
      started = System.monotonic_time(:millisecond)

      caller =
        spawn_link(fn ->
          ExMLX.matmul(a, a) |> ExMLX.matmul(a) |> ExMLX.matmul(a) |> ExMLX.eval()
          send(parent, :done)
        end)

      # Sample the caller's state until it is done: it waits in a receive
      # (:waiting) while the worker thread computes.
      samples = sample_until_done(caller, [])
      elapsed = System.monotonic_time(:millisecond) - started
      send(ticker, :stop)
      times = receive do: ({:ticks, times} -> times)
      waiting = Enum.count(samples, &(&1 == :waiting))

      assert length(samples) >= 5, "the matmul was too quick to observe (#{elapsed} ms)"

      assert waiting / length(samples) >= 0.9,
             "caller states: #{inspect(Enum.frequencies(samples))}"

      # The ticker asks for a 1 ms timeout each time. BLAS threads share the
      # cores with the VM, which delays ticks; a blocked scheduler would stop
      # them for the whole matmul.
      gaps = times |> Enum.chunk_every(2, 1, :discard) |> Enum.map(fn [l, e] -> l - e end)
      assert length(times) >= 5, "#{length(times)} ticks in #{elapsed} ms"
      assert Enum.max(gaps) < elapsed / 2, "longest pause #{Enum.max(gaps)} ms of #{elapsed} ms"
    after
      :erlang.system_flag(:schedulers_online, online)
    end
  end

  defp tick(times) do
    receive do
      :stop -> times
    after
      1 -> tick([System.monotonic_time(:millisecond) | times])
    end
  end

  defp sample_until_done(pid, acc) do
    receive do
      :done -> acc
    after
      1 ->
        case Process.info(pid, :status) do
          {:status, status} -> sample_until_done(pid, [status | acc])
          nil -> receive(do: (:done -> acc))
        end
    end
  end

  # A NIF waits briefly for an idle worker: quick work comes back as the
  # NIF's own {:ok, value}, long work as a message. Both must be right.
  defp call_eval(ref) do
    tag = make_ref()

    case ExMLX.Native.eval(tag, ref) do
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
    one = ExMLX.full(1.0, {:f, 32}, {}) |> ExMLX.eval()
    quick = for _ <- 1..200, do: call_eval(one.ref)
    assert :returned in quick

    a = ExMLX.full(1.0e-3, {:f, 32}, {1024, 1024})
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
    t = ExMLX.iota({:s, 32}, {4})
    {ref, :cpu} = Call.defer(&Native.binary(&1, :less, t.ref, t.ref), {:u, 8})
    # comparisons give :bool in MLX; deferred mode cast it to u8
    assert {{4}, {:u, 8}, :cpu} = Call.info(ref)
    assert Call.run(&Native.to_binary(&1, ref)) == <<0, 0, 0, 0>>
  end

  test "chains of deferred ops on one worker run in order" do
    one = ExMLX.full(1, {:s, 64}, {})

    ref =
      Enum.reduce(1..500, one.ref, fn _, acc ->
        {r, _} = Call.defer(&Native.binary(&1, :add, acc, one.ref), {:s, 64})
        r
      end)

    assert Call.run(&Native.item(&1, ref)) == 501
  end

  test "an error inside a deferred op is raised where the tensor is used" do
    t = ExMLX.iota({:f, 32}, {2, 2})
    {bad, _} = Call.defer(&Native.reduce(&1, :sum, t.ref, [5], false), {:f, 32})

    assert_raise ExMLX.Error, ~r/axes: axis 5 is out of range/, fn ->
      Call.run(&Native.to_binary(&1, bad))
    end

    # an op on a tensor known to have failed is refused at the call
    assert_raise ExMLX.Error, ~r/axis 5 is out of range/, fn ->
      Call.defer(&Native.unary(&1, :negate, bad), {:f, 32})
    end

    # one queued while its input is (maybe) still pending gets the error
    # either at the call or where its own result is used
    {pending, _} = Call.defer(&Native.reduce(&1, :sum, t.ref, [5], false), {:f, 32})

    error =
      try do
        {later, _} = Call.defer(&Native.unary(&1, :negate, pending), {:f, 32})
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
