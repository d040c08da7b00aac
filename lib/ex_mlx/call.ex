defmodule ExMLX.Call do
  @moduledoc false
  # Runs an asynchronous NIF and waits for its reply (see ExMLX.Native).

  @doc """
  Calls `nif.(tag)` with a fresh tag and waits for the worker's reply.
  Returns the value, or raises `ExMLX.Error`.
  """
  def run(nif) when is_function(nif, 1) do
    tag = make_ref()

    case nif.(tag) do
      :ok ->
        receive do
          {^tag, {:ok, value}} -> value
          {^tag, {:error, reason}} -> raise ExMLX.Error.from_reason(reason)
        end

      {:error, reason} ->
        raise ExMLX.Error.from_reason(reason)
    end
  end

  @doc "Unwraps a synchronous NIF result."
  def value({:error, {kind, message} = reason}) when is_atom(kind) and is_binary(message),
    do: raise(ExMLX.Error.from_reason(reason))

  def value(value), do: value
end
