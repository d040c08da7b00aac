defmodule ExMLX do
  @moduledoc """
  Apple's MLX arrays from Elixir, without Nx.

  This is the low-level API the Nx backend is built on. Tensors are
  `ExMLX.Tensor` structs; operations are lazy and run on the tensor's device
  (`:cpu` or `:gpu`), on a worker thread that owns the device's MLX stream, so
  no call blocks a BEAM scheduler.

      iex> a = ExMLX.from_binary(<<1::32-float-little, 2::32-float-little>>, {:f, 32}, {2})
      iex> b = ExMLX.from_binary(<<10::32-float-little, 20::32-float-little>>, {:f, 32}, {2})
      iex> ExMLX.add(a, b) |> ExMLX.to_binary()
      <<11::32-float-little, 22::32-float-little>>

  ## Devices

  Every function that creates a tensor from nothing takes a `:device` option;
  it defaults to `default_device/0`, which is `:cpu` unless the application
  environment says otherwise:

      config :ex_mlx, default_device: :gpu

  Asking for `:gpu` where MLX has none raises an `ExMLX.Error` of kind `:device`.
  """

  alias ExMLX.{Call, Native, Tensor}

  @typedoc "A tensor type, as Nx names it, or `:bool`."
  @type type :: Tensor.type()
  @type device :: Tensor.device()
  @type shape :: tuple()

  @doc """
  The device used when none is given: `Application.get_env(:ex_mlx, :default_device, :cpu)`.

      iex> ExMLX.default_device()
      :cpu
  """
  @spec default_device() :: device()
  def default_device, do: Application.get_env(:ex_mlx, :default_device, :cpu)

  @doc """
  The MLX version the native library was built against.

      iex> ExMLX.mlx_version()
      "0.32.2"
  """
  @spec mlx_version() :: String.t()
  def mlx_version, do: Native.mlx_version()

  # ---------------------------------------------------------------------------
  # Data in and out
  # ---------------------------------------------------------------------------

  @doc """
  A tensor holding a copy of `binary`: elements of `type`, little-endian,
  row-major, in `shape`.

  Options: `:device` (default `default_device/0`).

      iex> t = ExMLX.from_binary(<<1, 2, 3, 4, 5, 6>>, {:u, 8}, {2, 3})
      iex> {t.shape, t.type, t.device}
      {{2, 3}, {:u, 8}, :cpu}

  The binary's size must be exactly the shape's element count times the
  element size:

      iex> ExMLX.from_binary(<<1, 2, 3>>, {:u, 16}, {2})
      ** (ExMLX.Error) data: binary has 3 bytes, but shape {2} of {:u, 16} needs 4
  """
  @spec from_binary(binary(), type(), shape(), keyword()) :: Tensor.t()
  def from_binary(binary, type, shape, opts \\ []) do
    device = Keyword.get(opts, :device, default_device())
    Call.run(&Native.from_binary(&1, binary, type, shape, device)) |> Tensor.wrap()
  end

  @doc """
  The tensor's elements as a binary (row-major, little-endian), computing
  the tensor first if needed.

      iex> ExMLX.from_binary(<<7, 8>>, {:u, 8}, {2}) |> ExMLX.to_binary()
      <<7, 8>>
  """
  @spec to_binary(Tensor.t()) :: binary()
  def to_binary(%Tensor{ref: ref}), do: Call.run(&Native.to_binary(&1, ref))

  # ---------------------------------------------------------------------------
  # Queries
  # ---------------------------------------------------------------------------

  @doc """
  The tensor's shape, as MLX reports it.

      iex> ExMLX.from_binary(<<0::64>>, {:f, 32}, {1, 2}) |> ExMLX.shape()
      {1, 2}
  """
  @spec shape(Tensor.t()) :: shape()
  def shape(%Tensor{ref: ref}), do: ref |> Native.tensor_info() |> elem(0)

  @doc """
  The tensor's type, as MLX reports it.

      iex> ExMLX.from_binary(<<0::16>>, {:bf, 16}, {}) |> ExMLX.type()
      {:bf, 16}
  """
  @spec type(Tensor.t()) :: type()
  def type(%Tensor{ref: ref}), do: ref |> Native.tensor_info() |> elem(1)

  @doc """
  The device whose worker owns the tensor.

      iex> ExMLX.from_binary(<<1>>, :bool, {1}) |> ExMLX.device()
      :cpu
  """
  @spec device(Tensor.t()) :: device()
  def device(%Tensor{ref: ref}), do: ref |> Native.tensor_info() |> elem(2)

  @doc """
  The number of elements and the number of bytes of the tensor's data.

      iex> ExMLX.from_binary(<<0::96>>, {:f, 32}, {3}) |> ExMLX.size()
      {3, 12}
  """
  @spec size(Tensor.t()) :: {non_neg_integer(), non_neg_integer()}
  def size(%Tensor{ref: ref}), do: Native.tensor_size(ref)

  # ---------------------------------------------------------------------------
  # Evaluation
  # ---------------------------------------------------------------------------

  @doc """
  Computes the tensor now (operations are lazy) and returns it.

      iex> t = ExMLX.from_binary(<<1>>, {:u, 8}, {1})
      iex> ExMLX.eval(ExMLX.add(t, t)) |> ExMLX.to_binary()
      <<2>>
  """
  @spec eval(Tensor.t()) :: Tensor.t()
  def eval(%Tensor{ref: ref} = tensor) do
    Call.run(&Native.eval(&1, ref))
    tensor
  end

  # ---------------------------------------------------------------------------
  # Element-wise
  # ---------------------------------------------------------------------------

  @doc """
  `a + b`, element-wise, with broadcasting; the result type is MLX's promotion
  of the two types.

      iex> a = ExMLX.from_binary(<<1::32-signed-little, 2::32-signed-little>>, {:s, 32}, {2})
      iex> ExMLX.add(a, a) |> ExMLX.to_binary()
      <<2::32-signed-little, 4::32-signed-little>>
  """
  @spec add(Tensor.t(), Tensor.t()) :: Tensor.t()
  def add(%Tensor{ref: a}, %Tensor{ref: b}),
    do: Call.run(&Native.add(&1, a, b)) |> Tensor.wrap()
end
