defmodule ExMLX.Application do
  @moduledoc false
  use Application

  require Logger

  @impl true
  def start(_type, _args) do
    # The application starts without its library (so a release or a script can
    # still report the problem); every call then raises the same error.
    if ExMLX.Native.load_error() do
      Logger.warning(Exception.message(ExMLX.Native.not_loaded_error()))
    end

    apply_cache_limit(Application.get_env(:ex_mlx, :cache_limit, :default))
    apply_collect_after(Application.get_env(:ex_mlx, :collect_after, :default))
    apply_evaluate_ahead(Application.get_env(:ex_mlx, :evaluate_ahead, []))

    children = [
      {DynamicSupervisor, name: ExMLX.MonitorSupervisor, strategy: :one_for_one},
      ExMLX.ProgramCache
    ]

    Supervisor.start_link(children, strategy: :one_for_one, name: ExMLX.Supervisor)
  end

  # MLX's CPU allocator keeps freed buffers for reuse only up to its cache
  # limit, 32 MB by default: every larger buffer then comes fresh from the
  # OS, and writing it first costs a page fault per 4 KB page (bin/bench's
  # 64 MB transfer rows show the difference). ExMLX starts with a larger
  # limit where MLX's is smaller, and never lowers MLX's own (see
  # `ExMLX.Memory.default_cache_limit/0`); `config :ex_mlx, cache_limit:
  # bytes` sets another, `:mlx` keeps MLX's own.
  defp apply_cache_limit(:mlx), do: :ok

  defp apply_cache_limit(setting) do
    configure(:cache_limit, fn ->
      bytes = if setting == :default, do: ExMLX.Memory.default_cache_limit(), else: setting
      ExMLX.Memory.set_cache_limit(bytes)
    end)
  end

  # How many bytes of new tensors pass between garbage-collection hints
  # (ExMLX.Memory.set_collect_after/1); the library's default until set.
  defp apply_collect_after(:default), do: :ok

  defp apply_collect_after(bytes),
    do: configure(:collect_after, fn -> ExMLX.Memory.set_collect_after(bytes) end)

  # Evaluation ahead of reads per device kind (ExMLX.set_evaluate_ahead/2):
  # `config :ex_mlx, evaluate_ahead: [cpu: boolean, gpu: boolean]`.
  defp apply_evaluate_ahead(settings) do
    unless Keyword.keyword?(settings) and
             Enum.all?(settings, fn {k, v} -> k in [:cpu, :gpu] and is_boolean(v) end) do
      raise ArgumentError,
            "config :ex_mlx, evaluate_ahead: expected a keyword list of " <>
              "cpu: boolean and gpu: boolean, got: #{inspect(settings)}"
    end

    configure(:evaluate_ahead, fn ->
      for {kind, on} <- settings, do: ExMLX.set_evaluate_ahead(kind, on)
    end)
  end

  # Runs `set`, which applies the setting `config :ex_mlx, key: ...`. A
  # value the library refuses (ArgumentError) is logged, naming the key, and
  # raised again.
  defp configure(key, set) do
    set.()
    :ok
  rescue
    e in ExMLX.Error ->
      # The native library is missing: every call says so; starting goes on.
      if e.kind != :not_loaded, do: reraise(e, __STACKTRACE__)
      :ok

    e in ArgumentError ->
      Logger.error("config :ex_mlx, #{key}: #{Exception.message(e)}")
      reraise e, __STACKTRACE__
  end
end
