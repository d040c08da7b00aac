# Counts the BEAM's long_schedule events while a benchmark runs: a process or
# port that held its scheduler for 2 ms or more without yielding. A NIF that
# does long work on a normal scheduler shows as one; ExMLX's NIFs are meant
# to return within about a millisecond (longer work goes to the worker or a
# dirty scheduler), so a quiet machine should show none.
defmodule Bench.LongSchedule do
  @threshold_ms 2

  @doc """
  Runs `fun` with this VM's system monitor watching for long schedules:
  `{result, %{ex_mlx: events, others: events}}`, each event `{ms, in, out}`
  (the code its process was scheduled in and out at). The monitor in place
  before is restored after.
  """
  def around(fun) do
    collector = spawn_link(fn -> collect([]) end)
    previous = :erlang.system_monitor(collector, [{:long_schedule, @threshold_ms}])

    try do
      result = fun.()
      {result, report(collector)}
    after
      restore(previous)
    end
  end

  @doc """
  A note for a section's table: the events whose process was in ExMLX's
  code when it was scheduled in or out (a NIF of ExMLX.Native, say), and
  the others (the Evaluator's or Nx.BinaryBackend's Elixir, code loading,
  garbage collection of a large heap).
  """
  def note(%{ex_mlx: ours, others: others}) do
    "long_schedule events (a scheduler held #{@threshold_ms} ms or more) during these rows: " <>
      "#{describe(ours)} in ExMLX's code; #{describe(others)} elsewhere."
  end

  defp describe([]), do: "0"

  defp describe(events) do
    {ms, at, _} = Enum.max_by(events, &elem(&1, 0))
    "#{length(events)} (the longest #{ms} ms, in #{inspect(at)})"
  end

  defp in_ex_mlx?({_ms, at, out}), do: ex_mlx_mfa?(at) or ex_mlx_mfa?(out)

  defp ex_mlx_mfa?({module, _, _}) when is_atom(module),
    do: String.starts_with?(Atom.to_string(module), "Elixir.ExMLX")

  defp ex_mlx_mfa?(_), do: false

  defp restore({pid, opts}) when is_pid(pid), do: :erlang.system_monitor(pid, opts)
  defp restore(_), do: :erlang.system_monitor(:undefined)

  defp collect(events) do
    receive do
      {:monitor, _who, :long_schedule, info} ->
        collect([
          {Keyword.get(info, :timeout), Keyword.get(info, :in), Keyword.get(info, :out)} | events
        ])

      {:report, from} ->
        send(from, {:long_schedule, events})
    end
  end

  defp report(collector) do
    :erlang.system_monitor(:undefined)
    send(collector, {:report, self()})

    events =
      receive do
        {:long_schedule, events} -> events
      end

    Enum.split_with(events, &in_ex_mlx?/1)
    |> then(fn {ours, others} -> %{ex_mlx: ours, others: others} end)
  end
end
