defmodule ExMLX.Reliability.LoadTest do
  # 64 processes × 500 mixed operations, shared and private tensors; results
  # must equal a sequential run, with no deadlock, and a ticker process on the
  # normal schedulers must keep its rhythm meanwhile.
  use ExUnit.Case, async: false
  @moduletag :reliability

  @processes 64
  @ops 500

  defp step(i, shared, private) do
    case rem(i, 10) do
      0 ->
        ExMLX.full(i, {:s, 32}, {3}) |> ExMLX.to_list()

      1 ->
        ExMLX.add(shared, private) |> ExMLX.sum() |> ExMLX.item()

      2 ->
        ExMLX.matmul(ExMLX.reshape(shared, {4, 4}), ExMLX.reshape(private, {4, 4}))
        |> ExMLX.to_binary()

      3 ->
        ExMLX.reduce_max(ExMLX.multiply(shared, private), axes: [0]) |> ExMLX.item()

      4 ->
        shared |> ExMLX.slice([rem(i, 8)], [16]) |> ExMLX.sum() |> ExMLX.item()

      5 ->
        private |> ExMLX.Wire.encode() |> ExMLX.Wire.decode!() |> ExMLX.to_binary()

      6 ->
        ExMLX.item(ExMLX.argmax(ExMLX.subtract(private, shared)))

      7 ->
        ExMLX.transpose(ExMLX.reshape(private, {2, 8})) |> ExMLX.to_binary()

      8 ->
        ExMLX.from_binary(ExMLX.to_binary(shared), {:f, 32}, {16}) |> ExMLX.mean() |> ExMLX.item()

      9 ->
        ExMLX.sort(private, direction: :desc) |> ExMLX.to_binary()
    end
  end

  defp run(p, shared) do
    private =
      ExMLX.from_binary(
        for(j <- 0..15, into: <<>>, do: <<j * p * 0.25 - 1.0::32-float-little>>),
        {:f, 32},
        {16}
      )

    for i <- 1..@ops, do: step(i + p, shared, private)
  end

  @tag timeout: 300_000
  test "#{@processes} processes × #{@ops} ops match the sequential run" do
    shared =
      ExMLX.from_binary(
        for(j <- 0..15, into: <<>>, do: <<j * 0.5::32-float-little>>),
        {:f, 32},
        {16}
      )

    sequential = for p <- 1..@processes, do: run(p, shared)

    ticker = {start_ticker(), System.monotonic_time(:millisecond)}

    concurrent =
      1..@processes
      |> Enum.map(fn p -> Task.async(fn -> run(p, shared) end) end)
      |> Task.await_many(240_000)

    {elapsed_ms, ticks, missed, max_gap} = stop_ticker(ticker)
    assert concurrent == sequential

    # The normal schedulers stayed responsive: a process sleeping
    # #{@tick_ms} ms between ticks was woken on time (a gap of k intervals
    # counts k - 1 missed ticks).
    IO.puts(
      "\n  load: #{@processes} processes × #{@ops} ops in #{elapsed_ms} ms; " <>
        "ticker: #{ticks} ticks, #{missed} missed, longest gap #{max_gap} ms"
    )

    assert missed <= 5, "the ticker missed #{missed} ticks (longest gap #{max_gap} ms)"
  end

  @tick_ms 10

  defp start_ticker do
    spawn_link(fn -> tick(System.monotonic_time(:millisecond), {0, 0, 0}) end)
  end

  defp tick(last, {ticks, missed, max_gap} = counts) do
    receive do
      {:stop, from, started} ->
        send(from, {:ticks, System.monotonic_time(:millisecond) - started, counts})
    after
      @tick_ms ->
        now = System.monotonic_time(:millisecond)
        gap = now - last
        tick(now, {ticks + 1, missed + max(div(gap, @tick_ms) - 1, 0), max(max_gap, gap)})
    end
  end

  defp stop_ticker({pid, started}) do
    send(pid, {:stop, self(), started})

    receive do
      {:ticks, elapsed, {ticks, missed, max_gap}} -> {elapsed, ticks, missed, max_gap}
    end
  end
end
