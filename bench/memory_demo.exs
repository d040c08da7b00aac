# What ExMLX.Memory shows a person (run: mix run bench/memory_demo.exs).
alias ExMLX.Memory

IO.puts("Device: #{inspect(Memory.device_info(:cpu))}\n")

{:ok, monitor} = Memory.start_monitor(20)

reports =
  for {label, n} <- [small: 1_000_000, medium: 8_000_000, large: 32_000_000] do
    {_, report} =
      Memory.profile(label, fn ->
        a = ExMLX.iota({:f, 32}, {n})
        ExMLX.multiply(a, a) |> ExMLX.sum() |> ExMLX.item()
      end)

    report
  end

{_, nested} =
  Memory.profile(:outer, fn ->
    {_, inner} =
      Memory.profile(:inner, fn -> ExMLX.iota({:f, 64}, {4_000_000}) |> ExMLX.eval() end)

    inner
  end)

IO.puts("Profiles:\n" <> Memory.summary(reports ++ [nested]))
:erlang.garbage_collect()
Process.sleep(50)
samples = Memory.stop_monitor(monitor)
IO.puts("Monitor (every 20 ms):\n" <> Memory.summary(samples))

stats = Memory.stats()

IO.puts(
  "Now: active #{Memory.format_bytes(stats.active)}, cache #{Memory.format_bytes(stats.cache)}"
)

:ok = Memory.clear_cache()
IO.puts("After clear_cache: cache #{Memory.format_bytes(Memory.stats().cache)}")
