# Per-call cost of ExMLX's thread model (run: mix run bench/dispatch.exs).
#
#   sync NIF      a NIF that answers on the calling scheduler (tensor_info): the floor
#   hand-off      an async NIF whose work is nothing (waiting for a tensor that is
#                 ready): queue to the worker, wake it, answer, wake the caller
#   eval          eval of a computed tensor: answered on the calling scheduler
#   lazy add      building one graph node (add) through the worker
#   eager add     add + item: what a scalar round trip costs
#
# Reports the median and the 10th/90th percentiles over batches of calls.

defmodule Bench.Dispatch do
  @batches 30
  @per_batch 2_000

  def run do
    one = ExMLX.full(1.0, {:f, 32}, {})
    ExMLX.eval(one)

    cases = [
      {"sync NIF (tensor_info)", fn -> ExMLX.Native.tensor_info(one.ref) end},
      {"hand-off (await of a ready tensor)",
       fn -> ExMLX.Call.run(&ExMLX.Native.tensor_await(&1, one.ref)) end},
      {"eval of a computed tensor", fn -> ExMLX.eval(one) end},
      {"lazy add", fn -> ExMLX.add(one, one) end},
      {"eager add + item", fn -> ExMLX.add(one, one) |> ExMLX.item() end}
    ]

    IO.puts("| call | median µs | p10 µs | p90 µs |")
    IO.puts("|---|---:|---:|---:|")

    for {name, fun} <- cases do
      # warm up
      for _ <- 1..@per_batch, do: fun.()

      per_call =
        for _ <- 1..@batches do
          {us, _} = :timer.tc(fn -> for _ <- 1..@per_batch, do: fun.() end)
          us / @per_batch
        end
        |> Enum.sort()

      pct = fn p -> Enum.at(per_call, min(@batches - 1, trunc(p * @batches))) end
      IO.puts("| #{name} | #{fmt(pct.(0.5))} | #{fmt(pct.(0.1))} | #{fmt(pct.(0.9))} |")
    end
  end

  defp fmt(x), do: :erlang.float_to_binary(x, decimals: 2)
end

Bench.Dispatch.run()
