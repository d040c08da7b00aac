defmodule ExMLX.Op do
  @moduledoc false
  # The one path from Elixir to MLX's tensors: every op of the op table
  # (native/ex_mlx/core/src/ops/table.rs) runs through run/3 or defer/4,
  # and the few calls that are not ops (moving, reading and freeing a
  # tensor's data) through the functions below them. `ExMLX` and
  # `ExMLX.Backend` call these; nothing else calls ExMLX.Native's tensor
  # NIFs. Inputs are native tensor references; results are what the NIF
  # returns: `{ref, shape, type, device}` per tensor.

  alias ExMLX.{Call, Native}

  @doc """
  Runs op `name` on `inputs` with `params` (in the table's order) and waits
  for it: `{ref, shape, type, device}`, or a list of them for an op with
  several results. Raises `ExMLX.Error` for anything MLX or ExMLX refuses.
  """
  def run(name, inputs, params), do: Call.run(&Native.op(&1, name, inputs, params))

  @doc """
  Queues one-result op `name` without waiting: `{ref, device}` at once,
  the worker filling the tensor in the background (cast to `type`, or
  MLX's own type with `:any`). An error surfaces where the tensor is used.
  """
  def defer(name, inputs, params, type \\ :any),
    do: Call.defer(&Native.op(&1, name, inputs, params), type)

  @doc "Like `defer/4`, for a result whose `type` and `shape` were predicted (ExMLX.Prediction)."
  def defer_exact(name, inputs, params, type, shape),
    do: Call.deferred(Native.op({:deferred, type, shape}, name, inputs, params))

  @doc "A tensor made from `binary` on `device`, queued without waiting: `{ref, device}`."
  def from_binary_deferred(binary, type, shape, device, cast),
    do: Call.defer(&Native.from_binary(&1, binary, type, shape, device), cast)

  @doc "The tensor on `device`: `{ref, shape, type, device}`."
  def transfer(ref, device), do: Call.run(&Native.transfer(&1, ref, device))

  @doc "The tensor's bytes (row-major, little-endian)."
  def to_binary(ref), do: Call.run(&Native.to_binary(&1, ref))

  @doc "`{address, bytes}` of the tensor's data, which stays put while the tensor lives."
  def data_pointer(ref), do: Call.run(&Native.data_pointer(&1, ref))

  @doc "The only element, as an Elixir number."
  def item(ref), do: Call.run(&Native.item(&1, ref))

  @doc "Frees the tensor's data now: `true` if it had data."
  def deallocate(ref), do: Native.deallocate(ref)

  @doc "`{shape, type, device}`, waiting for a deferred tensor."
  def info(ref), do: Call.info(ref)
end
