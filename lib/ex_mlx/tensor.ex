defmodule ExMLX.Tensor do
  @moduledoc """
  An MLX array held by ExMLX.

  Fields:

    * `:ref` - the native resource; the array is freed when the last
      reference to it is garbage collected
    * `:shape` - a tuple of dimensions
    * `:type` - `{kind, bits}` as Nx names types (`{:f, 32}`, `{:bf, 16}`,
      `{:c, 64}`, ...) or `:bool`
    * `:device` - `:cpu` or `:gpu`, or a stream of one (`{:gpu, 1}`,
      see `ExMLX.Stream`)

  Operations are lazy: they build an MLX graph that is computed by
  `ExMLX.eval/1` or when data is read (`ExMLX.to_binary/1`).
  """
  @enforce_keys [:ref, :shape, :type, :device]
  defstruct [:ref, :shape, :type, :device]

  @type type ::
          {:u, 8 | 16 | 32 | 64}
          | {:s, 8 | 16 | 32 | 64}
          | {:f, 16 | 32 | 64}
          | {:bf, 16}
          | {:c, 64}
          | :bool
  @type device :: :cpu | :gpu | {:cpu | :gpu, pos_integer()}
  @type t :: %__MODULE__{
          ref: reference(),
          shape: tuple(),
          type: type(),
          device: device()
        }

  @doc false
  def wrap({ref, shape, type, device}),
    do: %__MODULE__{ref: ref, shape: shape, type: type, device: device}

  defimpl Inspect do
    def inspect(%{shape: shape, type: type, device: device}, _opts) do
      "#ExMLX.Tensor<#{type_name(type)}#{dims(shape)} #{device_name(device)}>"
    end

    defp device_name({kind, stream}), do: "#{kind} stream #{stream}"
    defp device_name(device), do: "#{device}"

    defp dims(shape), do: shape |> Tuple.to_list() |> Enum.map_join(&"[#{&1}]")

    defp type_name(:bool), do: "bool"
    defp type_name({kind, bits}), do: "#{kind}#{bits}"
  end
end
