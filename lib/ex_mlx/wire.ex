defmodule ExMLX.Wire do
  @moduledoc """
  The ExMLX wire format: tensors as bytes, bit for bit, for sending between
  nodes and storing. The layout is specified in `docs/wire-format.md`.

    * a **frame** holds one tensor: magic, version, type code, shape, byte
      length, CRC-32, data;
    * a **bundle** holds named tensors in the safetensors file layout, so
      Python's `safetensors` and Hugging Face checkpoints read and write it.

  Every ExMLX type has a code (bool, u8–u64, s8–s64, f16, bf16, f32, f64,
  c64); nothing is converted on the way, NaN payloads and `-0.0` included.
  Decoders check everything and return `{:error, {kind, message}}` for
  malformed input (`:bad_magic`, `:checksum_mismatch`, ...).

  Functions take `ExMLX.Tensor`s and, when Nx is available, `Nx.Tensor`s on
  any backend; pass `as: :nx` to decode into Nx tensors (on `ExMLX.Backend`).

      iex> t = ExMLX.iota({:s, 16}, {2, 3})
      iex> frame = ExMLX.Wire.encode(t)
      iex> byte_size(frame)
      48
      iex> {:ok, back} = ExMLX.Wire.decode(frame)
      iex> {back.shape, back.type, ExMLX.to_list(back)}
      {{2, 3}, {:s, 16}, [0, 1, 2, 3, 4, 5]}
  """

  import ExMLX.Args, only: [map!: 2, opts!: 2]

  alias ExMLX.{Call, Native, Tensor}

  @type tensor :: Tensor.t() | struct()
  @type error :: {atom(), String.t()}

  # ---------------------------------------------------------------------------
  # Frames
  # ---------------------------------------------------------------------------

  @doc """
  One tensor as a frame (its graph is computed first; views are written in
  logical order).
  """
  @spec encode(tensor()) :: binary()
  def encode(tensor) do
    %Tensor{ref: ref} = t = to_ex_mlx(tensor)

    # A small computed CPU tensor is encoded by wire_encode/2 on this
    # scheduler; a large one on a dirty scheduler (the NIF says
    # :not_evaluated when the worker must compute it first). See
    # ExMLX.Call.copy_path/2.
    with :dirty <- Call.copy_path(data_bytes(t), t.device),
         {:ok, frame} <- Native.wire_encode_dirty(ref) do
      frame
    else
      {:error, _} = error -> Call.value(error)
      _ -> Call.run(&Native.wire_encode(&1, ref))
    end
  end

  defp data_bytes(%Tensor{shape: shape, type: type}) do
    bits = if type == :bool, do: 8, else: elem(type, 1)
    shape |> Tuple.to_list() |> Enum.reduce(div(bits, 8), &(&1 * &2))
  end

  @doc """
  A tensor from a frame, or `{:error, {kind, message}}`.

  Options: `:device` (default `ExMLX.default_device/0`), `as: :nx` for an
  `Nx.Tensor`.

      iex> ExMLX.Wire.decode("nope")
      {:error, {:bad_magic, "not an ExMLX frame: it does not start with \\"EXMX\\""}}
  """
  @spec decode(binary(), keyword()) :: {:ok, tensor()} | {:error, error()}
  def decode(frame, opts \\ [])

  def decode(frame, opts) when is_binary(frame) do
    opts = opts!(opts, [:device, :as])
    device = Keyword.get(opts, :device, ExMLX.default_device())
    tag = make_ref()

    # CPU tensors are made without the worker where that is quicker (see
    # ExMLX.Call.copy_path/2 and native/ex_mlx/src/data.rs).
    # (a frame's header is at least 20 bytes; the rest is mostly data)
    result =
      case Call.copy_path(byte_size(frame) - 20, device) do
        :at_once -> Native.wire_decode_at_once(frame)
        :dirty -> Native.wire_decode_at_once_dirty(frame)
        :worker -> Native.wire_decode(tag, frame, device) |> Call.unhint()
      end

    case result do
      {:ok, native} ->
        {:ok, native |> Tensor.wrap() |> output(opts)}

      :ok ->
        receive do
          {^tag, {:ok, native}} -> {:ok, native |> Tensor.wrap() |> output(opts)}
          {^tag, {:error, reason}} -> {:error, reason}
        end

      {:error, reason} ->
        {:error, reason}
    end
  end

  def decode(other, _opts),
    do: {:error, {:argument, "frame: expected a binary, got: #{inspect(other)}"}}

  @doc """
  Like `decode/2`, raising `ExMLX.Error` on malformed input.

      iex> ExMLX.Wire.decode!(<<"EXMX", 9, 12, 0, 0>>)
      ** (ExMLX.Error) frame format version 9 is not supported (this ExMLX reads version 1)
  """
  @spec decode!(binary(), keyword()) :: tensor()
  def decode!(frame, opts \\ []) do
    case decode(frame, opts) do
      {:ok, tensor} -> tensor
      {:error, reason} -> raise ExMLX.Error.from_reason(reason)
    end
  end

  # ---------------------------------------------------------------------------
  # Bundles
  # ---------------------------------------------------------------------------

  @doc """
  Named tensors as a bundle (the safetensors layout). `metadata` is a map of
  strings to strings, stored under `__metadata__`.

      iex> bundle = ExMLX.Wire.encode_bundle(%{"w" => ExMLX.iota({:f, 32}, {2})})
      iex> {:ok, %{"w" => w}} = ExMLX.Wire.decode_bundle(bundle)
      iex> ExMLX.to_list(w)
      [0.0, 1.0]
  """
  @spec encode_bundle(%{optional(String.t()) => tensor()}, %{optional(String.t()) => String.t()}) ::
          binary()
  def encode_bundle(tensors, metadata \\ %{}) do
    {header, parts} = bundle_parts(tensors, metadata)
    IO.iodata_to_binary([header | Enum.map(parts, fn {_name, t} -> ExMLX.to_binary(t) end)])
  end

  @doc """
  Named tensors from a bundle, or `{:error, {kind, message}}`.

  Options: `:device`, `as: :nx`.
  """
  @spec decode_bundle(binary(), keyword()) :: {:ok, map()} | {:error, error()}
  def decode_bundle(bundle, opts \\ [])

  def decode_bundle(bundle, opts) when is_binary(bundle) do
    opts = opts!(opts, [:device, :as])
    size = byte_size(bundle)

    with {:ok, h} <- header_length(binary_part(bundle, 0, min(8, size)), size),
         {:ok, {entries, _metadata}} <- parse_header(binary_part(bundle, 8, h), size - 8 - h) do
      data_at = 8 + h

      read_entries(entries, opts, fn begin, len ->
        {:ok, binary_part(bundle, data_at + begin, len)}
      end)
    end
  end

  def decode_bundle(other, _opts),
    do: {:error, {:argument, "bundle: expected a binary, got: #{inspect(other)}"}}

  @doc """
  Writes named tensors to a file in the safetensors layout, one tensor at a
  time (memory use is one tensor's bytes, not the file's).
  """
  @spec write_bundle(Path.t(), map(), map()) :: :ok | {:error, term()}
  def write_bundle(path, tensors, metadata \\ %{}) do
    {header, parts} = bundle_parts(tensors, metadata)

    File.open(path, [:write, :binary, :raw], fn file ->
      :ok = IO.binwrite(file, header)
      Enum.each(parts, fn {_name, t} -> :ok = :file.write(file, ExMLX.to_binary(t)) end)
    end)
    |> case do
      {:ok, :ok} -> :ok
      {:ok, other} -> other
      error -> error
    end
  end

  @doc """
  Reads a safetensors file (written by ExMLX, Python's `safetensors`, or a
  Hugging Face checkpoint), one tensor at a time: memory use is the
  tensors' size once, plus one tensor's bytes while it is copied into MLX.

  Options: `:device`, `as: :nx`, `:only` - the names of the tensors to read
  (the others are skipped; a name the file does not hold is not an error).
  """
  @spec read_bundle(Path.t(), keyword()) :: {:ok, map()} | {:error, term()}
  def read_bundle(path, opts \\ []) do
    opts = opts!(opts, [:device, :as, :only])

    with_bundle_file(path, fn file, entries, data_at ->
      with {:ok, entries} <- only(entries, Keyword.get(opts, :only)) do
        read_entries(entries, opts, fn begin, len -> pread(file, data_at + begin, len) end)
      end
    end)
  end

  @doc """
  The names, types and shapes of the tensors a safetensors file holds, read
  from its header alone (no tensor data is read).

      iex> path = Path.join(System.tmp_dir!(), "ex_mlx_header_doctest.safetensors")
      iex> :ok = ExMLX.Wire.write_bundle(path, %{"w" => ExMLX.iota({:u, 32}, {2, 3})})
      iex> ExMLX.Wire.read_bundle_header(path)
      {:ok, %{"w" => {{:u, 32}, {2, 3}}}}
  """
  @spec read_bundle_header(Path.t()) ::
          {:ok, %{String.t() => {ExMLX.type(), tuple()}}} | {:error, term()}
  def read_bundle_header(path) when is_binary(path) do
    with_bundle_file(path, fn _file, entries, _data_at ->
      {:ok, Map.new(entries, fn {name, type, shape, _, _} -> {name, {type, shape}} end)}
    end)
  end

  def read_bundle_header(other),
    do: raise(ArgumentError, "path: expected a string, got: #{inspect(other)}")

  # `fun.(file, entries, data_at)` with the file at `path` open and its
  # header read (`data_at`: where its tensors' bytes start), or the error.
  defp with_bundle_file(path, fun) do
    with {:ok, %File.Stat{size: size}} <- File.stat(path),
         {:ok, file} <- :file.open(path, [:read, :binary, :raw]) do
      try do
        with {:ok, prefix} <- pread(file, 0, min(8, size)),
             {:ok, h} <- header_length(prefix, size),
             {:ok, json} <- pread(file, 8, h),
             {:ok, {entries, _metadata}} <- parse_header(json, size - 8 - h) do
          fun.(file, entries, 8 + h)
        end
      after
        :file.close(file)
      end
    end
  end

  defp only(entries, nil), do: {:ok, entries}

  defp only(entries, names) when is_list(names) do
    if Enum.all?(names, &is_binary/1) do
      wanted = MapSet.new(names)
      {:ok, Enum.filter(entries, fn entry -> MapSet.member?(wanted, elem(entry, 0)) end)}
    else
      {:error, {:argument, ":only: expected a list of tensor names, got: #{inspect(names)}"}}
    end
  end

  defp only(_entries, other),
    do: {:error, {:argument, ":only: expected a list of tensor names, got: #{inspect(other)}"}}

  defp pread(_file, _at, 0), do: {:ok, <<>>}

  defp pread(file, at, len) do
    case :file.pread(file, at, len) do
      {:ok, data} when byte_size(data) == len -> {:ok, data}
      {:ok, _short} -> {:error, {:truncated, "the file ends inside a tensor"}}
      :eof -> {:error, {:truncated, "the file ends inside a tensor"}}
      {:error, reason} -> {:error, reason}
    end
  end

  defp header_length(prefix, size) do
    case Native.bundle_header_length(prefix, size) do
      {:error, reason} -> {:error, reason}
      h when is_integer(h) -> {:ok, h}
    end
  end

  defp parse_header(json, data_len) do
    case Native.bundle_parse_header(json, data_len) do
      {:error, reason} -> {:error, reason}
      {entries, metadata} -> {:ok, {entries, metadata}}
    end
  end

  defp read_entries(entries, opts, read) do
    device = Keyword.get(opts, :device, ExMLX.default_device())

    Enum.reduce_while(entries, {:ok, %{}}, fn {name, type, shape, begin, stop}, {:ok, acc} ->
      with {:ok, data} <- read.(begin, stop - begin),
           {:ok, tensor} <- from_bytes(data, type, shape, device) do
        {:cont, {:ok, Map.put(acc, name, output(tensor, opts))}}
      else
        error -> {:halt, error}
      end
    end)
  end

  defp from_bytes(data, type, shape, device) do
    {:ok, ExMLX.from_binary(data, type, shape, device: device)}
  rescue
    e in ExMLX.Error -> {:error, {e.kind, e.message}}
  end

  defp bundle_parts(tensors, metadata) do
    parts =
      tensors
      |> map!(:tensors)
      |> Enum.map(fn {name, t} -> {text!(name, :tensors), to_ex_mlx(t)} end)
      |> Enum.sort_by(&elem(&1, 0))

    specs =
      Enum.map(parts, fn {name, %Tensor{type: type, shape: shape}} -> {name, type, shape} end)

    meta =
      Enum.map(map!(metadata, :metadata), fn {k, v} ->
        {text!(k, :metadata), text!(v, :metadata)}
      end)

    case Native.bundle_header(specs, meta) do
      {:error, reason} -> raise ExMLX.Error.from_reason(reason)
      {header, _offsets} -> {header, parts}
    end
  end

  # Tensor names, metadata keys and values: strings (atoms and numbers are
  # written as text).
  defp text!(value, _name) when is_binary(value), do: value
  defp text!(value, _name) when is_atom(value) or is_number(value), do: to_string(value)

  defp text!(other, name),
    do: raise(ArgumentError, "#{name}: expected string keys and values, got: #{inspect(other)}")

  # ---------------------------------------------------------------------------
  # Nx interplay
  # ---------------------------------------------------------------------------

  defp to_ex_mlx(%Tensor{} = t), do: t

  if Code.ensure_loaded?(Nx) do
    defp to_ex_mlx(%Nx.Tensor{type: type} = t) do
      check_nx_type!(type)
      ExMLX.Backend.from_nx(t)
    end

    defp to_ex_mlx(other),
      do: raise(ArgumentError, "expected an ExMLX.Tensor or an Nx.Tensor, got: #{inspect(other)}")

    defp check_nx_type!(type) do
      if ExMLX.Backend.storage_type(type) != type do
        raise ExMLX.Error,
          kind: :type,
          message: "#{inspect(type)} has no wire-format code (see docs/wire-format.md)"
      end
    end

    defp output(%Tensor{} = t, opts) do
      case Keyword.get(opts, :as, :ex_mlx) do
        :nx -> ExMLX.Backend.to_nx(t)
        _ -> t
      end
    end
  else
    defp to_ex_mlx(other),
      do: raise(ArgumentError, "expected an ExMLX.Tensor, got: #{inspect(other)}")

    defp output(t, _opts), do: t
  end
end
