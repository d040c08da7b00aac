# One rank of the distributed rows of bench/suite.exs (started by
# ExMLX.Distributed.Launcher): seconds of ExMLX.Distributed.all_sum of
# BYTES bytes of f32 (argv: BYTES REPS), each sample after a one-element
# all_sum that lines the ranks up. Rank 0 prints "BENCH <base64 term>".
alias ExMLX.Distributed, as: D

[bytes, reps] = Enum.map(System.argv(), &String.to_integer/1)
g = D.init(backend: :ring, strict: true, timeout: 600_000)
# (on the CPU, as the Python reference's collectives run, whatever the
# machine's default device)
x = ExMLX.full(1.0, {:f, 32}, {div(bytes, 4)}, device: :cpu) |> ExMLX.eval()
tiny = ExMLX.full(1.0, {:f, 32}, {g.size}, device: :cpu) |> ExMLX.eval()

samples =
  for i <- 1..(reps + 2), reduce: [] do
    acc ->
      D.all_sum(tiny)
      started = System.monotonic_time(:nanosecond)
      y = D.all_sum(x)
      elapsed = (System.monotonic_time(:nanosecond) - started) / 1.0e9
      # (all_sum returns an evaluated tensor; a check that it summed)
      if i == 1, do: true = ExMLX.to_list(ExMLX.slice(y, [0], [1])) == [g.size * 1.0]
      # (freed now, as Python frees it when the name is rebound: MLX's
      # allocator then reuses its buffer instead of faulting in new pages)
      ExMLX.deallocate(y)
      if i > 2, do: [elapsed | acc], else: acc
  end

if g.rank == 0 do
  s = Enum.sort(samples)
  n = length(s)

  summary = %{
    median: Enum.at(s, div(n, 2)),
    p10: Enum.at(s, trunc(0.1 * n)),
    p90: Enum.at(s, min(n - 1, trunc(0.9 * n)))
  }

  IO.puts("BENCH " <> Base.encode64(:erlang.term_to_binary(summary)))
end
