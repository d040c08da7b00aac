# Loaded by the GPU probes (bench/gpu/README.md) to run themselves as ranks.
defmodule Bench.GPU.Ranks do
  @moduledoc false

  @doc """
  Runs `script` once per rank, as `elixir -pa <ex_mlx's ebin> script rank`,
  through ExMLX.Distributed.Launcher with `opts`, printing each line a rank
  prints after its rank: `{statuses, lines}`, the launcher's exit statuses
  and every rank's lines, the last printed first.
  """
  def run(script, opts) do
    ebin = ExMLX.Distributed |> :code.which() |> to_string() |> Path.dirname()
    {:ok, store} = Agent.start_link(fn -> [] end)

    output = fn rank, line ->
      IO.puts("[#{rank}] #{line}")
      Agent.update(store, &[line | &1])
    end

    statuses =
      ExMLX.Distributed.Launcher.run(
        {"elixir", ["-pa", ebin, script, "rank"]},
        opts ++ [output: output]
      )

    {statuses, Agent.get(store, & &1)}
  end
end
