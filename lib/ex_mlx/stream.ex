defmodule ExMLX.Stream do
  @moduledoc """
  MLX's streams: queues of work on a device that run independently of each
  other.

  Each device has a default stream (`:cpu`, `:gpu`). `new/1` makes another
  one on a device; its name, `{:gpu, 1}` say, is a device wherever ExMLX
  takes one (`device:` options, `ExMLX.transfer/2`), and tensors made there
  stay there: ops on them run on that stream. Streams do not wait for each
  other: each has a thread of its own in ExMLX and its own queue in MLX
  (whether MLX's GPU backend then overlaps their kernels is MLX's to decide:
  docs/gpu.md says what was measured). ExMLX gives
  each stream a worker thread (MLX binds a stream to the thread that made
  it), so an op takes its inputs from one stream: move a tensor to another
  with `ExMLX.transfer/2` (which waits for it to be computed).

      iex> s = ExMLX.Stream.new(:cpu)
      iex> t = ExMLX.full(2.0, {:f, 32}, {3}, device: s.device)
      iex> ExMLX.Stream.synchronize(s)
      :ok
      iex> ExMLX.add(t, t) |> ExMLX.to_list()
      [4.0, 4.0, 4.0]
      iex> match?({:cpu, n} when n > 0, ExMLX.add(t, t).device)
      true

  A stream lasts as long as the VM (MLX keeps its streams for the life of
  the process); make the few you need once, not one per call.
  `ExMLX.Backend` and `ExMLX.Compiler` use the default streams.
  """

  alias ExMLX.{Call, Native, Tensor}

  @enforce_keys [:device]
  defstruct [:device]

  @type t :: %__MODULE__{device: {:cpu | :gpu, pos_integer()}}

  @doc """
  A new stream on `device` (`:cpu` or `:gpu`; a stream's name means its
  device). Raises `ExMLX.Error` when the device is not available.

      iex> %ExMLX.Stream{device: {:cpu, n}} = ExMLX.Stream.new(:cpu)
      iex> n > 0
      true
  """
  @spec new(Tensor.device()) :: t()
  def new(device \\ ExMLX.default_device()) do
    kind = kind!(device)
    %__MODULE__{device: Native.stream_new(kind) |> Call.value()}
  end

  @doc """
  Waits until everything queued on the stream so far has been computed
  (`mx.synchronize`). Accepts a stream or a device (its default stream).

      iex> ExMLX.Stream.synchronize(:cpu)
      :ok
  """
  @spec synchronize(t() | Tensor.device()) :: :ok
  def synchronize(%__MODULE__{device: device}), do: synchronize(device)

  def synchronize(device) do
    kind!(device)
    Call.run(&Native.stream_synchronize(&1, device))
  end

  defp kind!(device) when device in [:cpu, :gpu], do: device
  defp kind!({kind, n}) when kind in [:cpu, :gpu] and is_integer(n) and n > 0, do: kind

  defp kind!(other) do
    raise ArgumentError,
          "expected a device (:cpu, :gpu, or a stream such as {:gpu, 1}), got: #{inspect(other)}"
  end
end
