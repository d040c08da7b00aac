defmodule ExMLX.ProgramCache do
  @moduledoc false
  # The compiled programs of ExMLX.Compiler, by function and input templates,
  # in an ETS table this process owns (started by ExMLX.Application). Reads
  # go to the table directly (one lookup per call); a miss compiles in the
  # caller and inserts. `:persistent_term` would make every new entry a
  # global scan of all processes, and Nx hands the compiler a fresh closure
  # as the key whenever a call passes non-tensor arguments, so entries can
  # be many: at most `@max_entries` are kept, the table being emptied when it
  # is full (programs are cheap to record again).
  use GenServer

  @table __MODULE__
  @max_entries 4096

  def start_link(_opts), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @impl true
  def init([]) do
    :ets.new(@table, [:named_table, :public, :set, read_concurrency: true])
    {:ok, nil}
  end

  # The calling process's last few entries, newest first, in its process
  # dictionary.
  @recent {__MODULE__, :recent}
  @recent_size 8

  @doc """
  The entry of `key`, or `compile.()`'s result, stored under `key`.

  A key holds the jitted function, and a closure holds what it captured
  (`&Axon.predict(model, &1, &2)` captures the whole model: 124,271 words
  for a small BERT). The table hashes and compares all of it on every
  lookup (about 350 µs for that BERT), so each process first looks among
  the entries it used last: the same function term compares equal by
  address at once.
  """
  def fetch(key, compile) do
    recent = Process.get(@recent, [])

    case Enum.find(recent, fn {k, _} -> k === key end) do
      {_, compiled} ->
        compiled

      nil ->
        compiled = lookup(key, compile)
        Process.put(@recent, [{key, compiled} | Enum.take(recent, @recent_size - 1)])
        compiled
    end
  end

  defp lookup(key, compile) do
    # (lookup_element copies only the value out of the table; a key holds
    # every argument's template: a model's parameters make it large)
    :ets.lookup_element(@table, key, 2)
  rescue
    ArgumentError ->
      compiled = compile.()
      if :ets.info(@table, :size) >= @max_entries, do: :ets.delete_all_objects(@table)
      :ets.insert(@table, {key, compiled})
      compiled
  end

  @doc """
  Keeps `spec` (what a program was built from, for `ExMLX.Compiler.export/3`)
  beside the entries, out of the hot path: every call copies its entry out
  of the table, so entries stay small.
  """
  def put_spec(program, spec), do: :ets.insert(@table, {{:spec, program}, spec})

  @doc "The spec kept for `program`, or nil."
  def spec(program) do
    case :ets.lookup(@table, {:spec, program}) do
      [{_, spec}] -> spec
      [] -> nil
    end
  end

  @doc "Every entry, as `{key, compiled}` (for tests)."
  def entries, do: :ets.tab2list(@table)
end
