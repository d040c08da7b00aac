defmodule ExMLX.Error do
  @moduledoc """
  Raised when MLX or ExMLX rejects an operation.

  `:kind` says where the error comes from:

    * `:argument` - a bad argument; the message names it
    * `:type` - a type MLX cannot represent or the operation does not take
    * `:device` - a device that is not available, or tensors on different devices
    * `:out_of_memory` - the tensor would take active memory past the
      memory limit (`ExMLX.Memory.set_memory_limit/1`); nothing was allocated
    * `:mlx` - MLX raised an exception; the message is MLX's
    * `:not_loaded` - the native library is missing (run `bin/setup`)
    * `:cancelled` - work that stopped because its caller exited (a
      compiled program's `while` loop)
    * `:distributed` - a distributed backend that is missing or could not
      start, a peer that was lost (MLX's message), or a distributed call
      refused after an earlier one timed out (`ExMLX.Distributed`)
    * `:timeout` - a distributed call that did not finish within its
      timeout (`ExMLX.Distributed`)
    * `:internal` - a bug in ExMLX; please report it
  """
  defexception [:kind, :message]

  @type t :: %__MODULE__{kind: atom(), message: String.t()}

  @doc false
  def from_reason({kind, message}) when is_atom(kind) and is_binary(message),
    do: %__MODULE__{kind: kind, message: message}
end
