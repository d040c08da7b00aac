defmodule ExMLX.Reliability.KillTest do
  # Processes that own tensors are killed while MLX evaluates for them.
  use ExUnit.Case, async: false
  @moduletag :reliability

  alias ExMLX.Memory
  import ExMLX.TestHelpers, only: [settle: 0, settle_to: 2]

  test "hundreds of processes killed mid-evaluation leave memory at its baseline" do
    settle()
    baseline = Memory.stats().active
    parent = self()

    for i <- 1..300 do
      pid =
        spawn(fn ->
          a = ExMLX.iota({:f, 32}, {256, 256})
          send(parent, {:started, self()})
          # a matmul chain long enough to be killed in the middle of
          ExMLX.matmul(a, a)
          |> ExMLX.matmul(a)
          |> ExMLX.add(ExMLX.full(i, {:f, 32}, {}))
          |> ExMLX.eval()
        end)

      receive do
        {:started, ^pid} -> :ok
      end

      if rem(i, 3) != 0, do: Process.sleep(rem(i, 4))
      Process.exit(pid, :kill)
    end

    # the workers finish what was queued; then everything is garbage
    assert ExMLX.iota({:s, 32}, {3}) |> ExMLX.sum() |> ExMLX.item() == 3
    after_kills = settle_to(baseline, 1024 * 1024)

    IO.puts(
      "\n  kills: 300 survived; active memory #{baseline} bytes before, #{after_kills} after"
    )

    # (below the baseline is no leak: other tests' garbage, counted in the
    # baseline, may be freed since)
    assert after_kills - baseline <= 1024 * 1024
  end

  test "a tensor sent to another process works after its creator died" do
    parent = self()
    pid = spawn(fn -> send(parent, {:t, ExMLX.iota({:s, 32}, {4})}) end)
    t = receive do: ({:t, t} -> t)
    ref = Process.monitor(pid)
    receive do: ({:DOWN, ^ref, _, _, _} -> :ok)
    settle()
    assert ExMLX.to_list(ExMLX.add(t, t)) == [0, 2, 4, 6]
  end
end
