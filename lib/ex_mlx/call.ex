defmodule ExMLX.Call do
  @moduledoc false
  # Runs an asynchronous NIF and waits for its reply (see ExMLX.Native).

  @doc """
  Calls `nif.(tag)` with a fresh tag and waits for the worker's reply.
  Returns the value, or raises `ExMLX.Error`.

  The NIF waits a few µs for the worker itself: if the worker finished
  by then, the NIF returns `{:ok, value}` (or `{:error, reason}`) and no
  message comes; otherwise it returns `:ok` and the reply comes as
  `{tag, result}`.
  """
  def run(nif) when is_function(nif, 1) do
    tag = make_ref()

    case nif.(tag) do
      {:ok, value} ->
        value

      {:ok, value, :collect} ->
        collect()
        value

      :ok ->
        receive do
          {^tag, {:ok, value}} -> value
          {^tag, {:error, reason}} -> raise ExMLX.Error.from_reason(reason)
        end

      {:error, reason} ->
        raise ExMLX.Error.from_reason(reason)
    end
  end

  @doc """
  Queues a tensor-producing NIF in deferred mode: returns `{ref, device}` at
  once; the worker fills the tensor (cast to `type`) in the background, and
  an error surfaces where the tensor is used.
  """
  def defer(nif, type) when is_function(nif, 1), do: deferred(nif.({:deferred, type}))

  @doc """
  Queues a tensor-producing NIF in deferred mode for a result whose `type`
  and `shape` the caller predicted (ExMLX.Prediction): returns `{ref,
  device}` at once; the worker checks the prediction.
  """
  def defer_exact(nif, type, shape) when is_function(nif, 1),
    do: deferred(nif.({:deferred, type, shape}))

  @doc """
  What a NIF called in deferred mode returned: `{ref, device}`, or an
  `ExMLX.Error` raised for arguments it refused.
  """
  def deferred({:deferred, ref, device}), do: {ref, device}

  def deferred({:deferred, ref, device, :collect}) do
    collect()
    {ref, device}
  end

  def deferred({:error, reason}), do: raise(ExMLX.Error.from_reason(reason))

  @doc "`{shape, type, device}` of a tensor reference, waiting if it is still being computed."
  def info(ref) do
    case ExMLX.Native.tensor_info(ref) do
      :pending -> run(&ExMLX.Native.tensor_await(&1, ref)) |> Tuple.delete_at(0)
      {:error, reason} -> raise ExMLX.Error.from_reason(reason)
      info -> info
    end
  end

  @doc "Unwraps a synchronous NIF result."
  def value({:error, {kind, message} = reason}) when is_atom(kind) and is_binary(message),
    do: raise(ExMLX.Error.from_reason(reason))

  def value(value), do: value

  # Where a copy of `bytes` between a binary and a tensor runs (from_binary,
  # wire encode and decode), chosen by what was measured on the development
  # machine (docs/decisions/0008-where-copies-run.md): a normal-scheduler NIF
  # up to 64 KB (a dirty scheduler's or the worker's wake-up would cost more
  # than the copy); the device's worker up to 4 MB (its hand-off, a short spin on an
  # idle worker, beats a dirty scheduler's wake-up, and a new MLX buffer
  # made on a scheduler right after the previous one was dropped often gets
  # fresh pages); a dirty scheduler above (the wake-up is small beside the
  # copy, and large copies then run beside the worker's computations instead
  # of queueing behind them). Only on the CPU: `:gpu` tensors always go
  # through their worker. (Encoding, which allocates no MLX buffer, runs on
  # the caller up to 1 MB: the wire_encode NIF decides that itself.)
  @at_once_max 64 * 1024
  @dirty_min 4 * 1024 * 1024

  @doc "Where a CPU copy of `bytes` runs: `:at_once`, `:worker` or `:dirty`."
  def copy_path(bytes, :cpu) when bytes <= @at_once_max, do: :at_once
  def copy_path(bytes, :cpu) when bytes > @dirty_min, do: :dirty
  def copy_path(_bytes, _device), do: :worker

  @doc "The most bytes a normal-scheduler NIF copies (AT_ONCE_MAX in native/ex_mlx/src/data.rs)."
  def at_once_max, do: @at_once_max

  @doc """
  An asynchronous NIF's immediate result without its garbage-collection
  hint (`{:ok, value, :collect}` collects the caller's garbage and becomes
  `{:ok, value}`), for callers that match the result themselves.
  """
  def unhint({:ok, value, :collect}) do
    collect()
    {:ok, value}
  end

  def unhint(result), do: result

  # A reply with `:collect`: the tensors made since the last hint passed
  # ExMLX.Memory.set_collect_after/1's threshold; collecting the caller's
  # garbage frees the tensors it dropped (native/ex_mlx/src/collect.rs).
  defp collect, do: :erlang.garbage_collect()
end
