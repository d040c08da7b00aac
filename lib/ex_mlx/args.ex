defmodule ExMLX.Args do
  @moduledoc false
  # Checks of public functions' arguments. A wrong argument is an
  # ArgumentError whose message starts with the argument's name, so a caller
  # never sees a FunctionClauseError or a NIF's badarg from ExMLX's API.

  alias ExMLX.Tensor

  @doc "A tensor argument."
  def tensor!(%Tensor{} = tensor, _name), do: tensor
  def tensor!(other, name), do: fail!(name, "expected an ExMLX.Tensor", other)

  @doc "The references of a list of tensors."
  def refs!(tensors, name) when is_list(tensors) do
    Enum.map(tensors, fn
      %Tensor{ref: ref} ->
        ref

      other ->
        raise ArgumentError,
              "#{name}: expected a list of ExMLX.Tensor, got an element: #{inspect(other)}"
    end)
  end

  def refs!(other, name), do: fail!(name, "expected a list of ExMLX.Tensor", other)

  @doc "A list of tensors."
  def tensors!(tensors, name) when is_list(tensors) do
    Enum.each(tensors, fn
      %Tensor{} ->
        :ok

      other ->
        raise ArgumentError,
              "#{name}: expected a list of ExMLX.Tensor, got an element: #{inspect(other)}"
    end)

    tensors
  end

  def tensors!(other, name), do: fail!(name, "expected a list of ExMLX.Tensor", other)

  @doc "A list argument."
  def list!(list, _name) when is_list(list), do: list
  def list!(other, name), do: fail!(name, "expected a list", other)

  @doc "A map argument."
  def map!(map, _name) when is_map(map) and not is_struct(map), do: map
  def map!(other, name), do: fail!(name, "expected a map", other)

  @doc "Options: a keyword list of the given keys (see `Keyword.validate!/2`)."
  def opts!(opts, keys) do
    if Keyword.keyword?(opts),
      do: Keyword.validate!(opts, keys),
      else: fail!(:opts, "expected a keyword list", opts)
  end

  defp fail!(name, expected, got),
    do: raise(ArgumentError, "#{name}: #{expected}, got: #{inspect(got)}")
end
