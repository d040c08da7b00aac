defmodule ExMLX.Telemetry do
  @moduledoc """
  Telemetry events ExMLX emits when `:telemetry` is available (it comes with
  Nx); without it, nothing is emitted and nothing breaks.

    * `[:ex_mlx, :eval, :start]` and `[:ex_mlx, :eval, :stop]` - a span around
      each evaluation (`ExMLX.eval/1`, reading data with `ExMLX.to_binary/1`,
      `ExMLX.item/1`, and the backend's `to_binary`). Metadata: `:operation`.
      Measurements: `:system_time` (start), `:duration` (stop, native units).
    * `[:ex_mlx, :memory, :stats]` - each sample of a memory monitor
      (`ExMLX.Memory.start_monitor/1`). Measurements: the figures of
      `ExMLX.Memory.stats/0` in bytes. Metadata: `:monitor` (its pid).
    * `[:ex_mlx, :compiler, :compile]` - each time `ExMLX.Compiler` traces
      a function for new input templates (a miss of its program cache).
      Measurements, native time units: `:duration` (the whole), and for a
      program also `:trace` (Nx building the function's expression),
      `:lower` (recording it as ExMLX ops) and `:build` (making the native
      program). Metadata: `:device`, `:fuse`, and `:outcome` - `:program`,
      or `:evaluator` when the function runs on `Nx.Defn.Evaluator`
      (`ExMLX.Compiler`'s documentation says when).

  A handler that reports how long compiling took:

      :telemetry.attach("log-compiles", [:ex_mlx, :compiler, :compile],
        fn _event, %{duration: d}, %{outcome: outcome}, _ ->
          ms = System.convert_time_unit(d, :native, :microsecond) / 1000
          IO.puts("compiled (\#{outcome}) in \#{ms} ms")
        end, nil)
  """

  @doc false
  def available? do
    case :persistent_term.get({__MODULE__, :available}, :unknown) do
      :unknown ->
        available = Code.ensure_loaded?(:telemetry) and function_exported?(:telemetry, :span, 3)
        :persistent_term.put({__MODULE__, :available}, available)
        available

      known ->
        known
    end
  end

  @doc false
  def span(operation, fun) do
    if available?() do
      apply(:telemetry, :span, [
        [:ex_mlx, :eval],
        %{operation: operation},
        fn -> {fun.(), %{operation: operation}} end
      ])
    else
      fun.()
    end
  end

  @doc false
  def execute(event, measurements, metadata) do
    if available?(), do: apply(:telemetry, :execute, [event, measurements, metadata])
    :ok
  end
end
