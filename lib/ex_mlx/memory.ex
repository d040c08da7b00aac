defmodule ExMLX.Memory do
  @moduledoc """
  MLX's memory figures and levers, for Elixir callers.

  MLX allocates tensors from its own allocator and keeps freed buffers in a
  cache for reuse, so a process's memory can grow well past what its live
  tensors need. This module reports the numbers and sets the limits:

    * `stats/0` - active, peak and cached bytes, and the limits;
    * `profile/2` - the time and memory a block of work used;
    * `start_monitor/1`, `stop_monitor/1` - sample `stats/0` periodically;
    * `summary/1` - a readable table of samples or profile reports;
    * `set_memory_limit/1`, `set_cache_limit/1`, `clear_cache/0`,
      `reset_peak/0`, `device_info/1`;
    * `default_cache_limit/0`, `mlx_cache_limit/0` - the cache limit ExMLX
      starts with, and MLX's own;
    * `set_collect_after/1` - how often a process making tensors collects
      its garbage, so that dropped tensors free their memory.

  Figures are bytes. MLX's allocator is process-wide: the figures cover every
  tensor of the VM, not one Elixir process's.

      iex> stats = ExMLX.Memory.stats()
      iex> Enum.sort(Map.keys(stats))
      [:active, :cache, :cache_limit, :memory_limit, :peak]
  """

  alias ExMLX.Native

  @type stats :: %{
          active: non_neg_integer(),
          peak: non_neg_integer(),
          cache: non_neg_integer(),
          memory_limit: non_neg_integer(),
          cache_limit: non_neg_integer()
        }

  @type report :: %{
          label: term(),
          wall_us: non_neg_integer(),
          active_before: non_neg_integer(),
          active_after: non_neg_integer(),
          peak: non_neg_integer(),
          cache_delta: integer()
        }

  # ---------------------------------------------------------------------------
  # Figures
  # ---------------------------------------------------------------------------

  @doc """
  The current figures, in bytes: `:active` (held by live tensors), `:peak`
  (the most active memory since the last `reset_peak/0`), `:cache` (freed
  buffers kept for reuse), `:memory_limit` and `:cache_limit`.

      iex> %{active: active, peak: peak} = ExMLX.Memory.stats()
      iex> peak >= 0 and active >= 0
      true
  """
  @spec stats() :: stats()
  def stats do
    stats = Native.memory_stats() |> ExMLX.Call.value()
    # The peak carried over from profile/2 calls that reset MLX's own.
    %{stats | peak: max(stats.peak, carried_peak())}
  end

  @doc """
  Resets the peak to the current active memory.

      iex> ExMLX.Memory.reset_peak()
      :ok
  """
  @spec reset_peak() :: :ok
  def reset_peak do
    :atomics.put(peak_counter(), 1, 0)
    Native.memory_reset_peak() |> ExMLX.Call.value()
  end

  @doc """
  Frees MLX's cache of unused buffers (safe at any time, also when empty).

      iex> ExMLX.Memory.clear_cache()
      :ok
  """
  @spec clear_cache() :: :ok
  def clear_cache, do: Native.memory_clear_cache() |> ExMLX.Call.value()

  @doc """
  Sets MLX's memory limit in bytes; returns the previous limit.

  MLX's CPU allocator treats the limit as advice, so ExMLX enforces it: an
  operation whose result would take active memory past the limit raises
  `ExMLX.Error` with kind `:out_of_memory` before anything is allocated (a
  deferred Nx operation raises where its result is used). Views (reshape,
  transpose, broadcast, slice) allocate nothing and are not refused. Buffers
  MLX allocates for intermediate results within one evaluation are not
  checked. A limit below the memory in use is accepted: tensors already
  there stay valid, new ones are refused until enough are freed. Each worker
  thread reads MLX's figure once and then spends an allowance (an eighth of
  the room it found, at most 16 MiB) before reading it again, so small
  tensors cost no lock of MLX's allocator; a new limit voids every
  allowance.

      iex> previous = ExMLX.Memory.set_memory_limit(1_000_000)
      iex> try do
      ...>   ExMLX.full(0, {:u, 8}, {2_000_000})
      ...> rescue
      ...>   e in ExMLX.Error -> e.kind
      ...> end
      :out_of_memory
      iex> ExMLX.Memory.set_memory_limit(previous)
      1_000_000


      iex> previous = ExMLX.Memory.set_memory_limit(2_000_000_000)
      iex> ExMLX.Memory.set_memory_limit(previous)
      2_000_000_000
  """
  @spec set_memory_limit(non_neg_integer()) :: non_neg_integer()
  def set_memory_limit(bytes), do: set_limit(:memory_limit, bytes)

  @doc """
  Sets the cache limit in bytes (`0` disables the cache); returns the
  previous limit.

      iex> previous = ExMLX.Memory.set_cache_limit(0)
      iex> ExMLX.Memory.stats().cache_limit
      0
      iex> ExMLX.Memory.set_cache_limit(previous)
      0
  """
  @spec set_cache_limit(non_neg_integer()) :: non_neg_integer()
  def set_cache_limit(bytes), do: set_limit(:cache_limit, bytes)

  @doc """
  Sets how many bytes of new tensors pass between garbage-collection hints
  (`0`: none); returns the previous threshold.

  A tensor's memory is freed when the garbage collector of the process
  holding it runs, and the BEAM does not know a tensor's size: a loop that
  makes large tensors and drops them could keep gigabytes of dead tensors
  (GPU memory included) until its heap fills up, and meanwhile every new
  tensor needs fresh memory instead of reusing what the dead ones held. So
  ExMLX counts the bytes of the tensors it makes; each time they pass this
  threshold, the process making the next tensor collects its garbage
  (`:erlang.garbage_collect/0`, a few microseconds for the small heaps of
  processes that drive MLX). The default is 512 MiB; set another in your
  config (`config :ex_mlx, collect_after: bytes`, `0` for none).

      iex> previous = ExMLX.Memory.set_collect_after(0)
      iex> ExMLX.Memory.set_collect_after(previous)
      0
  """
  @spec set_collect_after(non_neg_integer()) :: non_neg_integer()
  def set_collect_after(bytes), do: set_limit(:collect_after, bytes)

  @doc """
  The cache limit ExMLX sets when it starts: MLX's own
  (`mlx_cache_limit/0`), raised to a quarter of the memory limit (at most
  1 GiB) where MLX's is smaller.

  MLX's own default on the CPU is 32 MB, below which a freed buffer is kept
  for reuse; every larger tensor then gets fresh pages from the OS, and the
  first write to them costs a page fault per 4 KB, which made a 64 MB
  `from_binary/4` several times slower. With the larger cache, steady-state work
  reuses warm buffers. On a GPU MLX's own limit is larger (CUDA: the memory
  limit) and is kept: a smaller one sends freed device buffers back to the
  driver, and a language model's prefill took twice as long
  (docs/decisions/0024-cache-limit-never-below-mlx.md). The cached bytes show
  as `:cache` in `stats/0` and `clear_cache/0` returns them to the OS. To
  choose another limit, set it in your config (`:mlx` keeps MLX's):

      config :ex_mlx, cache_limit: 256 * 1024 * 1024

      iex> limit = ExMLX.Memory.default_cache_limit()
      iex> raised = min(div(ExMLX.Memory.stats().memory_limit, 4), 1024 ** 3)
      iex> limit == max(ExMLX.Memory.mlx_cache_limit(), raised)
      true
  """
  @spec default_cache_limit() :: non_neg_integer()
  def default_cache_limit do
    max(mlx_cache_limit(), min(div(stats().memory_limit, 4), 1024 ** 3))
  end

  @doc """
  The cache limit MLX's allocator started with, whatever has been set since
  (`set_cache_limit/1`, the `:cache_limit` config): it depends on MLX's
  backend, 32 MB on the CPU, sized from the device's memory on a GPU.

      iex> previous = ExMLX.Memory.set_cache_limit(ExMLX.Memory.mlx_cache_limit() + 4096)
      iex> ExMLX.Memory.stats().cache_limit - ExMLX.Memory.mlx_cache_limit()
      4096
      iex> ExMLX.Memory.set_cache_limit(previous) - ExMLX.Memory.mlx_cache_limit()
      4096
  """
  @spec mlx_cache_limit() :: non_neg_integer()
  def mlx_cache_limit, do: Native.memory_mlx_cache_limit() |> ExMLX.Call.value()

  defp set_limit(which, bytes) when is_integer(bytes) and bytes >= 0,
    do: Native.memory_set_limit(which, bytes) |> ExMLX.Call.value()

  defp set_limit(which, bytes) do
    raise ArgumentError,
          "#{which} must be a non-negative integer (bytes), got: #{inspect(bytes)}"
  end

  @doc """
  What MLX (and the OS, for the host's memory) report about a device: keys
  such as `:device_name`, `:architecture`, `:memory_size`.

      iex> %{memory_size: bytes} = ExMLX.Memory.device_info(:cpu)
      iex> bytes > 0
      true
  """
  @spec device_info(ExMLX.device()) :: map()
  def device_info(device \\ :cpu), do: Native.device_info(device) |> ExMLX.Call.value()

  # ---------------------------------------------------------------------------
  # Profiling
  # ---------------------------------------------------------------------------

  @doc """
  Runs `fun` and returns `{result, report}`: wall time, active memory before
  and after, the peak during the call, and how much the cache grew.

  The peak is reset before `fun` runs; afterwards the higher of the earlier
  peak and this call's is kept, so profiles can nest and `stats/0` stays
  truthful.

      iex> {sum, report} =
      ...>   ExMLX.Memory.profile(:sum, fn ->
      ...>     ExMLX.iota({:s, 64}, {1024, 1024}) |> ExMLX.sum() |> ExMLX.item()
      ...>   end)
      iex> {sum, report.label, report.peak >= 8 * 1024 * 1024}
      {549_755_289_600, :sum, true}
  """
  @spec profile(term(), (... -> result)) :: {result, report()} when result: term()
  def profile(label \\ nil, fun)

  def profile(label, fun) when is_function(fun, 0) do
    before = stats()
    Native.memory_reset_peak() |> ExMLX.Call.value()
    started = System.monotonic_time(:microsecond)
    result = fun.()
    wall = System.monotonic_time(:microsecond) - started
    raw = Native.memory_stats() |> ExMLX.Call.value()
    during = raw.peak
    carry_peak(max(before.peak, during))

    report = %{
      label: label,
      wall_us: wall,
      active_before: before.active,
      active_after: raw.active,
      peak: during,
      cache_delta: raw.cache - before.cache
    }

    {result, report}
  end

  def profile(_label, other),
    do: raise(ArgumentError, "fun: expected a function of no arguments, got: #{inspect(other)}")

  defp peak_counter do
    case :persistent_term.get({__MODULE__, :peak}, nil) do
      nil ->
        counter = :atomics.new(1, signed: false)
        :persistent_term.put({__MODULE__, :peak}, counter)
        counter

      counter ->
        counter
    end
  end

  defp carried_peak, do: :atomics.get(peak_counter(), 1)

  defp carry_peak(value) do
    counter = peak_counter()
    current = :atomics.get(counter, 1)

    if value > current and :atomics.compare_exchange(counter, 1, current, value) != :ok,
      do: carry_peak(value),
      else: :ok
  end

  # ---------------------------------------------------------------------------
  # Monitor
  # ---------------------------------------------------------------------------

  @doc """
  Starts a supervised process that samples `stats/0` every `interval_ms`
  (and emits `[:ex_mlx, :memory, :stats]` telemetry with each sample).

  Samples are due at fixed times (start + n × interval), so time spent
  sampling or waiting for a busy scheduler does not add up; a sample that is
  late is taken at once. Options:

    * `:notify` - a pid that also receives each sample as the message
      `{:ex_mlx_memory_sample, monitor, sample}` (for live displays)

      iex> {:ok, monitor} = ExMLX.Memory.start_monitor(5, notify: self())
      iex> for _ <- 1..3 do
      ...>   receive do
      ...>     {:ex_mlx_memory_sample, ^monitor, %{active: _}} -> :sampled
      ...>   end
      ...> end
      [:sampled, :sampled, :sampled]
      iex> samples = ExMLX.Memory.stop_monitor(monitor)
      iex> length(samples) >= 3
      true
  """
  @spec start_monitor(pos_integer(), keyword()) :: {:ok, pid()}
  def start_monitor(interval_ms, opts \\ [])

  def start_monitor(interval_ms, opts) when is_integer(interval_ms) and interval_ms > 0 do
    opts = ExMLX.Args.opts!(opts, [:notify])

    case opts[:notify] do
      nil -> :ok
      pid when is_pid(pid) -> :ok
      other -> raise ArgumentError, "notify: expected a pid, got: #{inspect(other)}"
    end

    DynamicSupervisor.start_child(
      ExMLX.MonitorSupervisor,
      {ExMLX.Memory.Monitor, {interval_ms, opts[:notify]}}
    )
  end

  def start_monitor(interval_ms, _opts),
    do:
      raise(ArgumentError, "interval_ms must be a positive integer, got: #{inspect(interval_ms)}")

  @doc """
  Stops a monitor and returns its samples, oldest first: maps of `stats/0`
  with `:at_ms` (milliseconds since the monitor started).
  """
  @spec stop_monitor(pid()) :: [map()]
  def stop_monitor(monitor) when is_pid(monitor) do
    samples = GenServer.call(monitor, :samples)
    DynamicSupervisor.terminate_child(ExMLX.MonitorSupervisor, monitor)
    samples
  end

  # ---------------------------------------------------------------------------
  # Presentation
  # ---------------------------------------------------------------------------

  @doc """
  Bytes in human units (powers of 1024).

      iex> ExMLX.Memory.format_bytes(512)
      "512 B"
      iex> ExMLX.Memory.format_bytes(64 * 1024 * 1024)
      "64.0 MB"
      iex> ExMLX.Memory.format_bytes(3_221_225_472)
      "3.0 GB"
      iex> ExMLX.Memory.format_bytes(-2048)
      "-2.0 KB"
  """
  @spec format_bytes(integer()) :: String.t()
  def format_bytes(bytes) when is_integer(bytes) and bytes < 0, do: "-" <> format_bytes(-bytes)
  def format_bytes(bytes) when is_integer(bytes) and bytes < 1024, do: "#{bytes} B"

  def format_bytes(bytes) when is_integer(bytes) do
    {value, unit} =
      Enum.reduce_while(["KB", "MB", "GB", "TB"], {bytes / 1, "B"}, fn unit, {value, _} ->
        next = value / 1024
        if next < 1024 or unit == "TB", do: {:halt, {next, unit}}, else: {:cont, {next, unit}}
      end)

    "#{Float.round(value, 1)} #{unit}"
  end

  def format_bytes(other),
    do: raise(ArgumentError, "bytes: expected an integer, got: #{inspect(other)}")

  @doc """
  A readable table of monitor samples or profile reports.

      iex> {_, report} = ExMLX.Memory.profile(:noop, fn -> :ok end)
      iex> ExMLX.Memory.summary([report]) =~ "noop"
      true
  """
  @report_figures [:wall_us, :active_before, :active_after, :peak, :cache_delta]
  @sample_figures [:active, :peak, :cache]

  @spec summary([map()]) :: String.t()
  def summary([]), do: "(no samples)\n"

  def summary(items) when is_list(items) do
    cond do
      Enum.all?(items, &has_integers?(&1, @report_figures)) -> report_table(items)
      Enum.all?(items, &has_integers?(&1, @sample_figures)) -> sample_table(items)
      true -> summary({:mixed, items})
    end
  end

  def summary(other) do
    raise ArgumentError,
          "expected a list of profile reports or of monitor samples, got: #{inspect(other)}"
  end

  defp has_integers?(item, keys),
    do: is_map(item) and Enum.all?(keys, &is_integer(Map.get(item, &1)))

  defp report_table(reports) do
    rows =
      for r <- reports do
        [
          inspect(Map.get(r, :label)),
          "#{Float.round(r.wall_us / 1000, 2)} ms",
          format_bytes(r.active_before),
          format_bytes(r.active_after),
          format_bytes(r.peak),
          format_bytes(r.cache_delta)
        ]
      end

    table(["label", "wall", "active before", "active after", "peak", "cache Δ"], rows)
  end

  defp sample_table(samples) do
    rows =
      for s <- samples do
        [
          "#{Map.get(s, :at_ms, "")}",
          format_bytes(s.active),
          format_bytes(s.peak),
          format_bytes(s.cache)
        ]
      end

    table(["at ms", "active", "peak", "cache"], rows)
  end

  defp table(header, rows) do
    widths =
      [header | rows]
      |> Enum.zip_with(& &1)
      |> Enum.map(fn column -> column |> Enum.map(&String.length/1) |> Enum.max() end)

    line = fn cells ->
      cells
      |> Enum.zip(widths)
      |> Enum.map_join(" | ", fn {cell, w} -> String.pad_leading(cell, w) end)
    end

    rule = Enum.map_join(widths, "-+-", &String.duplicate("-", &1))
    Enum.join([line.(header), rule | Enum.map(rows, line)], "\n") <> "\n"
  end
end

defmodule ExMLX.Memory.Monitor do
  @moduledoc false
  # Samples ExMLX.Memory.stats/0 every interval; started by
  # ExMLX.Memory.start_monitor/2 under ExMLX.MonitorSupervisor.
  use GenServer, restart: :temporary

  def start_link(args), do: GenServer.start_link(__MODULE__, args)

  @doc """
  Milliseconds to wait, at time `now`, for the next sample when `taken`
  samples were taken since `started`: the next one is due at
  `started + taken × interval`, not one interval after the last one.
  """
  def delay(started, taken, interval, now), do: max(started + taken * interval - now, 0)

  @impl true
  def init({interval_ms, notify}) do
    started = System.monotonic_time(:millisecond)
    send(self(), :sample)
    {:ok, %{interval: interval_ms, notify: notify, started: started, taken: 0, samples: []}}
  end

  @impl true
  def handle_info(:sample, state) do
    stats = ExMLX.Memory.stats()
    now = System.monotonic_time(:millisecond)
    sample = Map.put(stats, :at_ms, now - state.started)
    ExMLX.Telemetry.execute([:ex_mlx, :memory, :stats], stats, %{monitor: self()})
    if state.notify, do: send(state.notify, {:ex_mlx_memory_sample, self(), sample})
    taken = state.taken + 1
    Process.send_after(self(), :sample, delay(state.started, taken, state.interval, now))
    {:noreply, %{state | taken: taken, samples: [sample | state.samples]}}
  end

  @impl true
  def handle_call(:samples, _from, state), do: {:reply, Enum.reverse(state.samples), state}
end
