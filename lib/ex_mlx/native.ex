defmodule ExMLX.Native do
  @moduledoc false
  # Every NIF of ExMLX is declared here and nowhere else.
  #
  # Asynchronous NIFs take a `tag` (a fresh reference) first: they check their
  # arguments, queue the work on the device's worker thread and return `:ok`
  # (or `{:error, {kind, message}}`); the result arrives later as the message
  # `{tag, {:ok, value} | {:error, {kind, message}}}`. `ExMLX.Call` waits for it.
  #
  # If the library is missing or fails to load, the module still loads and every
  # NIF raises an `ExMLX.Error` that says what was not found.

  @on_load :load_nif

  @doc false
  def load_nif do
    path = :filename.join(:code.priv_dir(:ex_mlx), ~c"native/libex_mlx")

    case :erlang.load_nif(path, 0) do
      :ok ->
        :persistent_term.erase({__MODULE__, :load_error})
        :ok

      {:error, {reason, text}} ->
        :persistent_term.put({__MODULE__, :load_error}, {path, reason, to_string(text)})
        :ok
    end
  end

  @doc false
  def load_error, do: :persistent_term.get({__MODULE__, :load_error}, nil)

  defp not_loaded do
    {path, reason, text} =
      load_error() ||
        {:filename.join(:code.priv_dir(:ex_mlx), ~c"native/libex_mlx"), :unknown, ""}

    raise ExMLX.Error,
      kind: :not_loaded,
      message:
        "the ExMLX native library was not loaded from #{path}.so (#{reason}: #{text}). " <>
          "Build it with bin/setup (or mix compile)."
  end

  # Library
  def mlx_version, do: not_loaded()

  # Tensor queries (synchronous)
  def tensor_info(_tensor), do: not_loaded()
  def tensor_size(_tensor), do: not_loaded()

  # Data in and out
  def from_binary(_tag, _binary, _type, _shape, _device), do: not_loaded()
  def to_binary(_tag, _tensor), do: not_loaded()

  # Evaluation
  def eval(_tag, _tensor), do: not_loaded()

  # Element-wise
  def add(_tag, _a, _b), do: not_loaded()
end
