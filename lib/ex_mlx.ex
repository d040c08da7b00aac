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

  ## Errors and waiting

  Arguments are checked when a function is called; a bad one raises
  `ExMLX.Error` (or `ArgumentError`) there. Most operations then wait for
  the worker to build the result's graph node, so MLX's own errors are raised
  at the call too. `add/2`, `subtract/2`, `multiply/2`, `max/2` and `min/2`
  do not wait: the shape and type of their result follow from the inputs'
  (broadcasting, MLX's type promotion), so they return at once and the
  worker catches up in the background. An error MLX raises for them (such as
  `:out_of_memory`) is raised where the result is used: `eval/1`,
  `to_binary/1`, `item/1`, or an operation on it.
  """

  # abs/1, round/1, min/2 and max/2 are tensor operations here.
  import Kernel, except: [abs: 1, round: 1, min: 2, max: 2]

  import ExMLX.Args, only: [tensor!: 2, refs!: 2, list!: 2, opts!: 2]

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
    opts = opts!(opts, [:device])

    device = Keyword.get(opts, :device, default_device())

    # CPU tensors are made without the worker where that is quicker: no MLX
    # stream is involved (native/ex_mlx/src/data.rs says why that is safe).
    case is_binary(binary) && Call.copy_path(byte_size(binary), device) do
      :here -> Native.from_binary_here(binary, type, shape) |> made_here()
      :dirty -> Native.from_binary_here_dirty(binary, type, shape) |> made_here()
      _ -> Call.run(&Native.from_binary(&1, binary, type, shape, device)) |> Tensor.wrap()
    end
  end

  @doc """
  The tensor's elements as a binary (row-major, little-endian), computing
  the tensor first if needed.

      iex> ExMLX.from_binary(<<7, 8>>, {:u, 8}, {2}) |> ExMLX.to_binary()
      <<7, 8>>
  """
  @spec to_binary(Tensor.t()) :: binary()
  def to_binary(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    ExMLX.Telemetry.span(:to_binary, fn -> Call.run(&Native.to_binary(&1, ref)) end)
  end

  # ---------------------------------------------------------------------------
  # Queries
  # ---------------------------------------------------------------------------

  @doc """
  The tensor's shape, as MLX reports it.

      iex> ExMLX.from_binary(<<0::64>>, {:f, 32}, {1, 2}) |> ExMLX.shape()
      {1, 2}
  """
  @spec shape(Tensor.t()) :: shape()
  def shape(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    ref |> Call.info() |> elem(0)
  end

  @doc """
  The tensor's type, as MLX reports it.

      iex> ExMLX.from_binary(<<0::16>>, {:bf, 16}, {}) |> ExMLX.type()
      {:bf, 16}
  """
  @spec type(Tensor.t()) :: type()
  def type(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    ref |> Call.info() |> elem(1)
  end

  @doc """
  The device whose worker owns the tensor.

      iex> ExMLX.from_binary(<<1>>, :bool, {1}) |> ExMLX.device()
      :cpu
  """
  @spec device(Tensor.t()) :: device()
  def device(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    ref |> Call.info() |> elem(2)
  end

  @doc """
  The number of elements and the number of bytes of the tensor's data.

      iex> ExMLX.from_binary(<<0::96>>, {:f, 32}, {3}) |> ExMLX.size()
      {3, 12}
  """
  @spec size(Tensor.t()) :: {non_neg_integer(), non_neg_integer()}
  def size(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    # (waits for a deferred result, raising its error if it failed)
    Call.info(ref)
    Native.tensor_size(ref)
  end

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
  def eval(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    ExMLX.Telemetry.span(:eval, fn -> Call.run(&Native.eval(&1, ref)) end)
    tensor
  end

  @doc """
  Frees the tensor's data now rather than when the tensor is garbage
  collected. Returns `:ok`, or `:already_deallocated`. Using the tensor
  afterwards raises.

      iex> t = ExMLX.full(1, {:u, 8}, {2})
      iex> ExMLX.deallocate(t)
      :ok
      iex> ExMLX.deallocate(t)
      :already_deallocated
  """
  @spec deallocate(Tensor.t()) :: :ok | :already_deallocated
  def deallocate(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    if Native.deallocate(ref), do: :ok, else: :already_deallocated
  end

  # ---------------------------------------------------------------------------
  # Devices
  # ---------------------------------------------------------------------------

  @doc """
  Whether this MLX build can run on `device` (`:gpu` is Metal on macOS and
  CUDA on Linux builds that have it).

      iex> ExMLX.device_available?(:cpu)
      true
  """
  @spec device_available?(device()) :: boolean()
  def device_available?(device), do: device |> Native.device_available() |> Call.value()

  @doc """
  The tensor on `device`: computed on its current device, then handed to
  the other device's worker.

      iex> t = ExMLX.full(1, {:u, 8}, {2})
      iex> ExMLX.transfer(t, :cpu).device
      :cpu
  """
  @spec transfer(Tensor.t(), device()) :: Tensor.t()
  def transfer(tensor, device) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Call.run(&Native.transfer(&1, ref, device)) |> Tensor.wrap()
  end

  # ---------------------------------------------------------------------------
  # Creation and conversion
  # ---------------------------------------------------------------------------

  @doc """
  A tensor of `shape` filled with `value`: an integer, a float, `:nan`,
  `:infinity`, `:neg_infinity`, or `{re, im}` for `{:c, 64}`.

  Options: `:device`.

      iex> ExMLX.full(7, {:s, 16}, {2}) |> ExMLX.to_binary()
      <<7::16-little, 7::16-little>>

  An integer that does not fit the type is an error, not a wrap-around:

      iex> ExMLX.full(300, {:u, 8}, {1})
      ** (ExMLX.Error) value: 300 does not fit in {:u, 8}
  """
  @spec full(number() | atom() | {number(), number()}, type(), shape(), keyword()) :: Tensor.t()
  def full(value, type, shape, opts \\ []) do
    opts = opts!(opts, [:device])
    device = Keyword.get(opts, :device, default_device())
    Call.run(&Native.full(&1, value, type, shape, device)) |> Tensor.wrap()
  end

  @doc """
  Counts `0, 1, 2, ...` along `:axis` of `shape`, or over the whole tensor
  row-major when no axis is given (Nx's `iota`).

  Options: `:axis`, `:device`.

      iex> ExMLX.iota({:s, 32}, {2, 2}) |> ExMLX.to_list()
      [0, 1, 2, 3]
      iex> ExMLX.iota({:s, 32}, {2, 2}, axis: 0) |> ExMLX.to_list()
      [0, 0, 1, 1]
  """
  @spec iota(type(), shape(), keyword()) :: Tensor.t()
  def iota(type, shape, opts \\ []) do
    opts = opts!(opts, [:axis, :device])
    device = Keyword.get(opts, :device, default_device())
    Call.run(&Native.iota(&1, type, shape, opts[:axis], device)) |> Tensor.wrap()
  end

  @doc """
  An `n × m` matrix with ones on the diagonal (`m` defaults to `n`).

      iex> ExMLX.eye(2, {:u, 8}) |> ExMLX.to_binary()
      <<1, 0, 0, 1>>
  """
  @spec eye(non_neg_integer(), type(), keyword()) :: Tensor.t()
  def eye(n, type, opts \\ []) do
    opts = opts!(opts, [:device, :m])
    device = Keyword.get(opts, :device, default_device())
    m = Keyword.get(opts, :m, n)
    Call.run(&Native.eye(&1, n, m, type, device)) |> Tensor.wrap()
  end

  @doc """
  Converts the elements to `type` (floats to integers truncate toward zero).

      iex> ExMLX.full(2.75, {:f, 32}, {}) |> ExMLX.as_type({:s, 32}) |> ExMLX.item()
      2
  """
  @spec as_type(Tensor.t(), type()) :: Tensor.t()
  def as_type(tensor, type) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Call.run(&Native.as_type(&1, ref, type)) |> Tensor.wrap()
  end

  @doc """
  Reinterprets the bytes of each element as `type`, which must have the same size.

      iex> ExMLX.full(1.0, {:f, 32}, {}) |> ExMLX.bitcast({:u, 32}) |> ExMLX.item()
      0x3F800000
  """
  @spec bitcast(Tensor.t(), type()) :: Tensor.t()
  def bitcast(tensor, type) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Call.run(&Native.bitcast(&1, ref, type)) |> Tensor.wrap()
  end

  @doc """
  The only element of the tensor as an Elixir number, read with the tensor's
  own type from a contiguous copy (never misread from a view).

  Floats come back as floats or `:nan`, `:infinity`, `:neg_infinity`;
  complex numbers as `{re, im}`; `:bool` as `true`/`false`.

      iex> ExMLX.iota({:s, 64}, {1000}) |> ExMLX.slice([951], [952]) |> ExMLX.squeeze() |> ExMLX.item()
      951
      iex> ExMLX.full(:nan, {:bf, 16}, {}) |> ExMLX.item()
      :nan
  """
  @spec item(Tensor.t()) ::
          number() | boolean() | :nan | :infinity | :neg_infinity | {term(), term()}
  def item(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    ExMLX.Telemetry.span(:item, fn -> Call.run(&Native.item(&1, ref)) end)
  end

  @doc """
  The elements as a flat list of numbers (row-major), decoded from
  `to_binary/1` with the tensor's type.

      iex> ExMLX.full(1.5, {:f, 16}, {3}) |> ExMLX.to_list()
      [1.5, 1.5, 1.5]
  """
  @spec to_list(Tensor.t()) :: list()
  def to_list(tensor) do
    %Tensor{type: type} = tensor!(tensor, :tensor)
    tensor |> to_binary() |> decode_list(type)
  end

  defp decode_list(bin, :bool), do: for(<<x::8 <- bin>>, do: x == 1)
  defp decode_list(bin, {:u, n}), do: for(<<x::size(n)-unsigned-little <- bin>>, do: x)
  defp decode_list(bin, {:s, n}), do: for(<<x::size(n)-signed-little <- bin>>, do: x)
  # bf16 is the top half of an f32: little-endian <<lo, hi>> is the f32 <<0, 0, lo, hi>>.
  defp decode_list(bin, {:bf, 16}),
    do: for(<<x::16-bits <- bin>>, do: read_float(<<0::16, x::bits>>))

  defp decode_list(bin, {:f, n}), do: for(<<x::size(n)-bits <- bin>>, do: read_float(x))

  defp decode_list(bin, {:c, 64}),
    do: for(<<re::32-bits, im::32-bits <- bin>>, do: {read_float(re), read_float(im)})

  # A little-endian IEEE float; NaN and the infinities (which Erlang floats
  # cannot hold) become the atoms Nx uses.
  defp read_float(bits) do
    size = bit_size(bits)

    case bits do
      <<x::size(size)-float-little>> ->
        x

      _ ->
        <<int::size(size)-little>> = bits
        {exp_bits, mant_bits} = %{16 => {5, 10}, 32 => {8, 23}, 64 => {11, 52}}[size]
        <<sign::1, _exp::size(exp_bits), mant::size(mant_bits)>> = <<int::size(size)>>

        cond do
          mant != 0 -> :nan
          sign == 0 -> :infinity
          true -> :neg_infinity
        end
    end
  end

  # ---------------------------------------------------------------------------
  # Element-wise
  # ---------------------------------------------------------------------------

  @unary ~w(abs negate sign floor ceil round sqrt rsqrt exp expm1 log log1p log2 log10
            sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf erf_inv
            sigmoid square reciprocal logical_not is_nan is_infinity is_finite real imag
            conjugate degrees radians erfc cbrt bitwise_not population_count count_leading_zeros)a

  @binary ~w(subtract multiply divide pow remainder quotient atan2 min max equal not_equal
             less less_equal greater greater_equal logical_and logical_or logical_xor
             logaddexp bitwise_and bitwise_or bitwise_xor left_shift right_shift)a

  @doc "The element-wise unary operations, each a function of this module."
  def unary_ops, do: @unary

  @doc "The element-wise binary operations (besides `add/2`), each a function of this module."
  def binary_ops, do: @binary

  @integer_only ~w(bitwise_not population_count count_leading_zeros bitwise_and bitwise_or
                   bitwise_xor left_shift right_shift)a

  # What the generated examples below show: each operation's value on one
  # input, computed here at compile time with Erlang's :math and Bitwise (not
  # by MLX), so every example checks MLX's result against an independent
  # reference. Floats are shown to 4 decimals.
  x = 0.75

  erf_inv =
    Enum.reduce(1..80, {0.0, 5.0}, fn _, {lo, hi} ->
      mid = (lo + hi) / 2
      if :math.erf(mid) < x, do: {mid, hi}, else: {lo, mid}
    end)
    |> elem(0)

  unary_reference = %{
    abs: Kernel.abs(x),
    negate: -x,
    sign: 1.0,
    floor: 0.0,
    ceil: 1.0,
    round: 1.0,
    sqrt: :math.sqrt(x),
    rsqrt: 1 / :math.sqrt(x),
    exp: :math.exp(x),
    expm1: :math.exp(x) - 1,
    log: :math.log(x),
    log1p: :math.log(1 + x),
    log2: :math.log2(x),
    log10: :math.log10(x),
    sin: :math.sin(x),
    cos: :math.cos(x),
    tan: :math.tan(x),
    asin: :math.asin(x),
    acos: :math.acos(x),
    atan: :math.atan(x),
    sinh: :math.sinh(x),
    cosh: :math.cosh(x),
    tanh: :math.tanh(x),
    asinh: :math.asinh(x),
    acosh: {1.5, :math.acosh(1.5)},
    atanh: :math.atanh(x),
    erf: :math.erf(x),
    erf_inv: erf_inv,
    erfc: :math.erfc(x),
    sigmoid: 1 / (1 + :math.exp(-x)),
    square: x * x,
    reciprocal: 1 / x,
    degrees: x * 180 / :math.pi(),
    radians: x * :math.pi() / 180,
    cbrt: :math.pow(x, 1 / 3),
    real: x,
    imag: 0.0,
    conjugate: x,
    logical_not: x == 0,
    is_nan: false,
    is_infinity: false,
    is_finite: true,
    bitwise_not: {5, Bitwise.band(Bitwise.bnot(5), 0xFF)},
    population_count: {5, 5 |> Integer.digits(2) |> Enum.sum()},
    count_leading_zeros: {5, 8 - length(Integer.digits(5, 2))}
  }

  # How an example reads its result, and how the expected value is shown:
  # floats to 4 decimals.
  read = fn
    expected when is_float(expected) -> "ExMLX.to_list() |> Enum.map(&Float.round(&1, 4))"
    _ -> "ExMLX.to_list()"
  end

  show = fn
    v when is_float(v) -> inspect(Float.round(v, 4))
    v -> inspect(v)
  end

  for op <- @unary do
    {input, expected} =
      case unary_reference[op] do
        {input, expected} -> {input, expected}
        expected -> {x, expected}
      end

    type = if op in @integer_only, do: "{:u, 8}", else: "{:f, 32}"
    example = "ExMLX.full(#{input}, #{type}, {2})"
    read = read.(expected)

    @doc """
    Element-wise `#{op}`. Lazy: computed by `eval/1` or when read.

        iex> #{example} |> ExMLX.#{op}() |> #{read}
        [#{show.(expected)}, #{show.(expected)}]
    """
    @spec unquote(op)(Tensor.t()) :: Tensor.t()
    def unquote(op)(tensor) do
      %Tensor{ref: ref} = tensor!(tensor, :tensor)
      Call.run(&Native.unary(&1, unquote(op), ref)) |> Tensor.wrap()
    end
  end

  # Binary examples: 3.0 and 2.0 (f32), or for the integer-only operations
  # the s32 tensor [0, 1, 2] and 2; references computed as above.
  binary_reference = %{
    subtract: 1.0,
    multiply: 6.0,
    divide: 1.5,
    pow: 9.0,
    remainder: 1.0,
    quotient: 1.0,
    atan2: :math.atan2(3, 2),
    min: 2.0,
    max: 3.0,
    equal: false,
    not_equal: true,
    less: false,
    less_equal: false,
    greater: true,
    greater_equal: true,
    logical_and: true,
    logical_or: true,
    logical_xor: false,
    logaddexp: :math.log(:math.exp(3) + :math.exp(2)),
    bitwise_and: &Bitwise.band(&1, 2),
    bitwise_or: &Bitwise.bor(&1, 2),
    bitwise_xor: &Bitwise.bxor(&1, 2),
    left_shift: &Bitwise.bsl(&1, 2),
    right_shift: &Bitwise.bsr(&1, 2)
  }

  for op <- @binary do
    {a, b, read, expected} =
      case binary_reference[op] do
        fun when is_function(fun, 1) ->
          {"ExMLX.iota({:s, 32}, {3})", "ExMLX.full(2, {:s, 32}, {})", read.(0),
           inspect(Enum.map(0..2, fun))}

        value ->
          {"ExMLX.full(3.0, {:f, 32}, {2})", "ExMLX.full(2.0, {:f, 32}, {})", read.(value),
           "[#{show.(value)}, #{show.(value)}]"}
      end

    @doc """
    Element-wise `#{op}` with broadcasting and MLX's type promotion
    (comparisons and logical operations give `:bool`).

        iex> a = #{a}
        iex> ExMLX.#{op}(a, #{b}) |> #{read}
        #{expected}
    """
    @spec unquote(op)(Tensor.t(), Tensor.t()) :: Tensor.t()
    def unquote(op)(a, b) do
      tensor!(a, :a)
      tensor!(b, :b)
      binary_op(unquote(op), a, b)
    end
  end

  @doc """
  `a + b`, element-wise, with broadcasting; the result type is MLX's promotion
  of the two types.

      iex> a = ExMLX.from_binary(<<1::32-signed-little, 2::32-signed-little>>, {:s, 32}, {2})
      iex> ExMLX.add(a, a) |> ExMLX.to_binary()
      <<2::32-signed-little, 4::32-signed-little>>
  """
  @spec add(Tensor.t(), Tensor.t()) :: Tensor.t()
  def add(a, b) do
    tensor!(a, :a)
    tensor!(b, :b)
    binary_op(:add, a, b)
  end

  # add, subtract, multiply, max and min return at once: their result's
  # shape and type follow from the inputs' (ExMLX.Prediction), so the worker
  # builds the graph node in the background and only reading data waits. An
  # error MLX raises there (say, running out of memory) surfaces where the
  # result is used. Other operations wait for the worker's answer.
  @predicted ExMLX.Prediction.ops()

  defp binary_op(op, a, b) when op in @predicted do
    case ExMLX.Prediction.binary(op, a, b) do
      {:ok, shape, type} ->
        # (Call.defer_exact/3 without its closure: the hottest path of the API)
        {ref, device} = Call.deferred(Native.binary({:deferred, type, shape}, op, a.ref, b.ref))
        %Tensor{ref: ref, shape: shape, type: type, device: device}

      :unknown ->
        Call.run(&Native.binary(&1, op, a.ref, b.ref)) |> Tensor.wrap()
    end
  end

  defp binary_op(op, a, b), do: Call.run(&Native.binary(&1, op, a.ref, b.ref)) |> Tensor.wrap()

  # ---------------------------------------------------------------------------
  # Reductions
  # ---------------------------------------------------------------------------

  # min/2 and max/2 are element-wise, so their reductions are reduce_min/2, reduce_max/2.
  # Reduction examples: [[0, 1, 2], [3, 4, 5]] over axis 1, the expected
  # rows computed with Enum.
  rows = [[0, 1, 2], [3, 4, 5]]

  for {name, op, reference} <- [
        {:sum, :sum, &Enum.sum/1},
        {:product, :product, &Enum.product/1},
        {:reduce_min, :min, &Enum.min/1},
        {:reduce_max, :max, &Enum.max/1},
        {:all, :all, &Enum.all?(&1, fn v -> v != 0 end)},
        {:any, :any, &Enum.any?(&1, fn v -> v != 0 end)},
        {:mean, :mean, &(Enum.sum(&1) / length(&1))}
      ] do
    @doc """
    `#{op}` over `:axes` (all axes by default); `keep_dims: true` keeps the
    reduced axes with size 1.

        iex> ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.#{name}(axes: [1]) |> ExMLX.to_list()
        #{inspect(Enum.map(rows, reference))}
    """
    @spec unquote(name)(Tensor.t(), keyword()) :: Tensor.t()
    def unquote(name)(tensor, opts \\ []) do
      %Tensor{ref: ref} = tensor!(tensor, :tensor)
      opts = opts!(opts, [:axes, :keep_dims])
      axes = Keyword.get(opts, :axes)
      keep = Keyword.get(opts, :keep_dims, false)
      Call.run(&Native.reduce(&1, unquote(op), ref, axes, keep)) |> Tensor.wrap()
    end
  end

  for {op, reference} <- [
        window_sum: &Enum.sum/1,
        window_product: &Enum.product/1,
        window_max: &Enum.max/1,
        window_min: &Enum.min/1
      ] do
    @doc """
    `#{op}` over windows of `window` (a tuple or list, one size per axis).

    Options (one entry per axis): `:strides` (1), `:padding` (`{low, high}`,
    padded with the reduction's identity), `:window_dilations` (1).

        iex> ExMLX.iota({:s, 32}, {5}) |> ExMLX.#{op}({2}) |> ExMLX.to_list()
        #{inspect(0..4 |> Enum.chunk_every(2, 1, :discard) |> Enum.map(reference))}
    """
    @spec unquote(op)(Tensor.t(), tuple() | [pos_integer()], keyword()) :: Tensor.t()
    def unquote(op)(tensor, window, opts \\ []) do
      %Tensor{ref: ref, shape: shape} = tensor!(tensor, :tensor)
      opts = opts!(opts, [:padding, :strides, :window_dilations])
      window = if is_tuple(window), do: Tuple.to_list(window), else: window
      n = tuple_size(shape)
      strides = Keyword.get(opts, :strides, List.duplicate(1, n))
      padding = Keyword.get(opts, :padding, List.duplicate({0, 0}, n))
      dilations = Keyword.get(opts, :window_dilations, List.duplicate(1, n))

      Call.run(&Native.window(&1, unquote(op), ref, window, strides, padding, dilations))
      |> Tensor.wrap()
    end
  end

  @doc """
  Index of the largest element along `:axis` (of the flattened tensor by
  default); ties go to the lowest index.

      iex> ExMLX.from_binary(<<1, 9, 9, 2>>, {:u, 8}, {4}) |> ExMLX.argmax() |> ExMLX.item()
      1
  """
  @spec argmax(Tensor.t(), keyword()) :: Tensor.t()
  def argmax(t, opts \\ []) do
    tensor!(t, :tensor)
    opts = opts!(opts, [:axis, :keep_dims])
    arg_reduce(:argmax, t, opts)
  end

  @doc """
  Index of the smallest element along `:axis` (of the flattened tensor by
  default); ties go to the lowest index.

      iex> ExMLX.from_binary(<<5, 1, 1, 2>>, {:u, 8}, {4}) |> ExMLX.argmin() |> ExMLX.item()
      1
  """
  @spec argmin(Tensor.t(), keyword()) :: Tensor.t()
  def argmin(t, opts \\ []) do
    tensor!(t, :tensor)
    opts = opts!(opts, [:axis, :keep_dims])
    arg_reduce(:argmin, t, opts)
  end

  defp arg_reduce(op, %Tensor{ref: ref}, opts) do
    axis = Keyword.get(opts, :axis)
    keep = Keyword.get(opts, :keep_dims, false)
    Call.run(&Native.arg_reduce(&1, op, ref, axis, keep)) |> Tensor.wrap()
  end

  # ---------------------------------------------------------------------------
  # Shape
  # ---------------------------------------------------------------------------

  @doc """
  The same elements in a new shape with as many elements.

      iex> ExMLX.iota({:u, 8}, {6}) |> ExMLX.reshape({2, 3}) |> ExMLX.shape()
      {2, 3}
  """
  @spec reshape(Tensor.t(), shape()) :: Tensor.t()
  def reshape(tensor, shape) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Call.run(&Native.reshape(&1, ref, shape)) |> Tensor.wrap()
  end

  @doc """
  Permutes the axes (reverses them by default).

      iex> ExMLX.iota({:u, 8}, {2, 3}) |> ExMLX.transpose() |> ExMLX.to_list()
      [0, 3, 1, 4, 2, 5]
  """
  @spec transpose(Tensor.t(), [integer()] | nil) :: Tensor.t()
  def transpose(tensor, axes \\ nil) do
    %Tensor{ref: ref, shape: shape} = tensor!(tensor, :tensor)
    axes = axes || Enum.reverse(Enum.to_list(0..(tuple_size(shape) - 1)//1))
    Call.run(&Native.transpose(&1, ref, axes)) |> Tensor.wrap()
  end

  @doc """
  Broadcasts to `shape` (NumPy rules: trailing axes match or are 1).

      iex> ExMLX.full(1, {:u, 8}, {3}) |> ExMLX.broadcast_to({2, 3}) |> ExMLX.to_list()
      [1, 1, 1, 1, 1, 1]
  """
  @spec broadcast_to(Tensor.t(), shape()) :: Tensor.t()
  def broadcast_to(tensor, shape) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Call.run(&Native.broadcast_to(&1, ref, shape)) |> Tensor.wrap()
  end

  @doc """
  Removes size-1 axes (all of them, or those in `axes`).

      iex> ExMLX.full(1, {:u, 8}, {1, 3, 1}) |> ExMLX.squeeze() |> ExMLX.shape()
      {3}
  """
  @spec squeeze(Tensor.t(), [integer()] | nil) :: Tensor.t()
  def squeeze(tensor, axes \\ nil) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Call.run(&Native.squeeze(&1, ref, axes)) |> Tensor.wrap()
  end

  @doc """
  Inserts size-1 axes at `axes` (positions in the result).

      iex> ExMLX.full(1, {:u, 8}, {3}) |> ExMLX.expand_dims([0, 2]) |> ExMLX.shape()
      {1, 3, 1}
  """
  @spec expand_dims(Tensor.t(), [integer()]) :: Tensor.t()
  def expand_dims(tensor, axes) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Call.run(&Native.expand_dims(&1, ref, axes)) |> Tensor.wrap()
  end

  @doc """
  Reverses the elements along `axes`.

      iex> ExMLX.iota({:u, 8}, {3}) |> ExMLX.flip([0]) |> ExMLX.to_list()
      [2, 1, 0]
  """
  @spec flip(Tensor.t(), [integer()]) :: Tensor.t()
  def flip(tensor, axes) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Call.run(&Native.flip(&1, ref, axes)) |> Tensor.wrap()
  end

  @doc """
  Elements `starts[i]..stops[i]-1` of each axis, every `strides[i]`-th
  (default 1): a view into the tensor.

      iex> ExMLX.iota({:u, 8}, {10}) |> ExMLX.slice([1], [8], [3]) |> ExMLX.to_list()
      [1, 4, 7]
  """
  @spec slice(Tensor.t(), [integer()], [integer()], [integer()] | nil) :: Tensor.t()
  def slice(tensor, starts, stops, strides \\ nil) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    strides = strides || List.duplicate(1, length(list!(starts, :starts)))
    Call.run(&Native.slice(&1, ref, starts, stops, strides)) |> Tensor.wrap()
  end

  @doc """
  A block of `lengths` starting at `starts`, clamped so it fits (as Nx does).
  `starts` is a list of integers or an integer tensor (so it can be computed).

      iex> t = ExMLX.iota({:u, 8}, {6})
      iex> ExMLX.dynamic_slice(t, [4], [3]) |> ExMLX.to_list()
      [3, 4, 5]
  """
  @spec dynamic_slice(Tensor.t(), [integer()] | Tensor.t(), [non_neg_integer()]) :: Tensor.t()
  def dynamic_slice(t, starts, lengths) do
    %Tensor{ref: ref} = tensor!(t, :tensor)
    %Tensor{ref: s} = starts_tensor(starts, t)
    Call.run(&Native.dynamic_slice(&1, ref, s, lengths)) |> Tensor.wrap()
  end

  @doc """
  The tensor with `update` written at `starts` (clamped so it fits), Nx's `put_slice`.

      iex> t = ExMLX.full(0, {:u, 8}, {4})
      iex> ExMLX.put_slice(t, [1], ExMLX.full(7, {:u, 8}, {2})) |> ExMLX.to_list()
      [0, 7, 7, 0]
  """
  @spec put_slice(Tensor.t(), [integer()] | Tensor.t(), Tensor.t()) :: Tensor.t()
  def put_slice(t, starts, update) do
    %Tensor{ref: ref} = tensor!(t, :tensor)
    %Tensor{ref: update} = tensor!(update, :update)
    %Tensor{ref: s} = starts_tensor(starts, t)
    Call.run(&Native.put_slice(&1, ref, s, update)) |> Tensor.wrap()
  end

  defp starts_tensor(%Tensor{} = starts, _t), do: starts

  defp starts_tensor(starts, %Tensor{device: device}) do
    unless is_list(starts) and Enum.all?(starts, &is_integer/1) do
      raise ArgumentError,
            "starts: expected a list of integers or an integer tensor, got: #{inspect(starts)}"
    end

    # Starts are clamped into range (as Nx does), so clamping a start past
    # the s64 range first gives the same result; writing it unclamped would
    # wrap it around.
    data =
      for s <- starts,
          into: <<>>,
          do:
            <<s
              |> Kernel.max(-0x8000000000000000)
              |> Kernel.min(0x7FFFFFFFFFFFFFFF)::64-signed-little>>

    from_binary(data, {:s, 64}, {length(starts)}, device: device)
  end

  @doc """
  Joins tensors along an existing axis.

      iex> a = ExMLX.iota({:u, 8}, {2})
      iex> ExMLX.concatenate([a, a], 0) |> ExMLX.to_list()
      [0, 1, 0, 1]
  """
  @spec concatenate([Tensor.t()], integer()) :: Tensor.t()
  def concatenate(tensors, axis \\ 0) do
    refs = refs!(tensors, :tensors)
    Call.run(&Native.concatenate(&1, refs, axis)) |> Tensor.wrap()
  end

  @doc """
  Joins tensors of one shape along a new axis.

      iex> a = ExMLX.iota({:u, 8}, {2})
      iex> ExMLX.stack([a, a], 1) |> ExMLX.shape()
      {2, 2}
  """
  @spec stack([Tensor.t()], integer()) :: Tensor.t()
  def stack(tensors, axis \\ 0) do
    refs = refs!(tensors, :tensors)
    Call.run(&Native.stack(&1, refs, axis)) |> Tensor.wrap()
  end

  @doc """
  `on_true` where `pred` is non-zero, else `on_false` (broadcasting all three).

      iex> pred = ExMLX.from_binary(<<1, 0>>, {:u, 8}, {2})
      iex> ExMLX.select(pred, ExMLX.full(1, {:s, 8}, {2}), ExMLX.full(-1, {:s, 8}, {2})) |> ExMLX.to_list()
      [1, -1]
  """
  @spec select(Tensor.t(), Tensor.t(), Tensor.t()) :: Tensor.t()
  def select(pred, on_true, on_false) do
    %Tensor{ref: p} = tensor!(pred, :pred)
    %Tensor{ref: t} = tensor!(on_true, :on_true)
    %Tensor{ref: f} = tensor!(on_false, :on_false)
    Call.run(&Native.select(&1, p, t, f)) |> Tensor.wrap()
  end

  @doc """
  Clamps every element into `[min, max]`.

      iex> t = ExMLX.iota({:s, 32}, {5})
      iex> ExMLX.clip(t, ExMLX.full(1, {:s, 32}, {}), ExMLX.full(3, {:s, 32}, {})) |> ExMLX.to_list()
      [1, 1, 2, 3, 3]
  """
  @spec clip(Tensor.t(), Tensor.t(), Tensor.t()) :: Tensor.t()
  def clip(tensor, min, max) do
    %Tensor{ref: t} = tensor!(tensor, :tensor)
    %Tensor{ref: min} = tensor!(min, :min)
    %Tensor{ref: max} = tensor!(max, :max)
    Call.run(&Native.clip(&1, t, min, max)) |> Tensor.wrap()
  end

  @doc """
  Pads each axis with `{low, high}` or `{low, high, interior}` copies of
  `value` (a rank-0 tensor): interior padding goes between elements first,
  then the edges; negative edges remove elements.

      iex> t = ExMLX.iota({:u, 8}, {3})
      iex> ExMLX.pad(t, [{1, -1}], ExMLX.full(9, {:u, 8}, {})) |> ExMLX.to_list()
      [9, 0, 1]
      iex> ExMLX.pad(t, [{0, 0, 1}], ExMLX.full(9, {:u, 8}, {})) |> ExMLX.to_list()
      [0, 9, 1, 9, 2]
  """
  @spec pad(
          Tensor.t(),
          [{integer(), integer()} | {integer(), integer(), non_neg_integer()}],
          Tensor.t()
        ) ::
          Tensor.t()
  def pad(tensor, widths, value) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    %Tensor{ref: value} = tensor!(value, :value)
    Call.run(&Native.pad(&1, ref, widths, value)) |> Tensor.wrap()
  end

  # ---------------------------------------------------------------------------
  # Linear algebra
  # ---------------------------------------------------------------------------

  @doc """
  Matrix product (NumPy semantics: batched over leading axes).

      iex> a = ExMLX.from_binary(<<1, 2, 3, 4>>, {:u, 8}, {2, 2})
      iex> ExMLX.matmul(a, ExMLX.eye(2, {:u, 8})) |> ExMLX.to_list()
      [1, 2, 3, 4]
  """
  @spec matmul(Tensor.t(), Tensor.t()) :: Tensor.t()
  def matmul(a, b) do
    %Tensor{ref: a} = tensor!(a, :a)
    %Tensor{ref: b} = tensor!(b, :b)
    Call.run(&Native.matmul(&1, a, b)) |> Tensor.wrap()
  end

  @doc """
  Contracts `axes_a` of `a` with `axes_b` of `b` (integers exactly).

      iex> a = ExMLX.iota({:s, 32}, {2, 3})
      iex> ExMLX.tensordot(a, a, [1], [1]) |> ExMLX.to_list()
      [5, 14, 14, 50]
  """
  @spec tensordot(Tensor.t(), Tensor.t(), [integer()], [integer()]) :: Tensor.t()
  def tensordot(a, b, axes_a, axes_b) do
    %Tensor{ref: a} = tensor!(a, :a)
    %Tensor{ref: b} = tensor!(b, :b)
    Call.run(&Native.tensordot(&1, a, b, axes_a, axes_b)) |> Tensor.wrap()
  end

  @doc """
  Einstein summation over `tensors` (`"ij,jk->ik"`; floating types).

      iex> a = ExMLX.iota({:f, 32}, {2, 2})
      iex> ExMLX.einsum("ii->", [a]) |> ExMLX.item()
      3.0
  """
  @spec einsum(String.t(), [Tensor.t()]) :: Tensor.t()
  def einsum(subscripts, tensors) do
    refs = refs!(tensors, :tensors)
    Call.run(&Native.einsum(&1, subscripts, refs)) |> Tensor.wrap()
  end

  @doc """
  Factorisations and inverses of (batches of) matrices, on the CPU:
  `:cholesky` → `[l]` (`upper: true` for `u`), `:qr` → `[q, r]`,
  `:eigh` → `[eigenvalues, eigenvectors]`, `:svd` → `[u, s, vt]`,
  `:lu` → `[p, l, u]`, `:inv` → `[inverse]`, `:tri_inv` → `[inverse]`,
  `:determinant` → `[det]`.

      iex> a = ExMLX.from_binary(<<4.0::32-float-little, 2.0::32-float-little, 2.0::32-float-little, 5.0::32-float-little>>, {:f, 32}, {2, 2})
      iex> [l] = ExMLX.linalg(:cholesky, a)
      iex> ExMLX.to_list(l)
      [2.0, 0.0, 1.0, 2.0]
  """
  @spec linalg(atom(), Tensor.t(), keyword()) :: [Tensor.t()]
  def linalg(op, t, opts \\ []) do
    tensor!(t, :tensor)
    opts = opts!(opts, [:upper])
    upper = Keyword.get(opts, :upper, false)

    # MLX's linear algebra runs on the CPU stream only.
    on_cpu(t, fn %Tensor{ref: ref} ->
      Call.run(&Native.linalg(&1, op, ref, upper)) |> Enum.map(&Tensor.wrap/1)
    end)
  end

  # Runs `fun` on a CPU copy of `t` and brings the results back to `t`'s device.
  defp on_cpu(%Tensor{device: :cpu} = t, fun), do: fun.(t)

  defp on_cpu(%Tensor{device: device} = t, fun) do
    case fun.(transfer(t, :cpu)) do
      list when is_list(list) -> Enum.map(list, &transfer(&1, device))
      %Tensor{} = result -> transfer(result, device)
    end
  end

  @doc """
  `x` with `a · x = b`; `triangular: :lower | :upper` uses the triangular solver.

      iex> a = ExMLX.from_binary(<<2.0::32-float-little, 0.0::32-float-little, 0.0::32-float-little, 4.0::32-float-little>>, {:f, 32}, {2, 2})
      iex> b = ExMLX.from_binary(<<2.0::32-float-little, 2.0::32-float-little>>, {:f, 32}, {2})
      iex> ExMLX.solve(a, b) |> ExMLX.to_list()
      [1.0, 0.5]
  """
  @spec solve(Tensor.t(), Tensor.t(), keyword()) :: Tensor.t()
  def solve(a, b, opts \\ []) do
    tensor!(a, :a)
    tensor!(b, :b)
    opts = opts!(opts, [:triangular])

    on_cpu(a, fn %Tensor{ref: a} ->
      %Tensor{ref: b} = if b.device == :cpu, do: b, else: transfer(b, :cpu)
      Call.run(&Native.solve(&1, a, b, opts[:triangular])) |> Tensor.wrap()
    end)
  end

  @doc """
  N-d convolution in MLX's channels-last layout: `input` is
  `{batch, spatial..., in_channels}`, `kernel` is
  `{out_channels, spatial..., in_channels / groups}`.

  Options (one entry per spatial axis): `:strides` (1), `:padding`
  (`{low, high}`, `{0, 0}`), `:kernel_dilation` (1), `:input_dilation` (1);
  `:groups` (1).

      iex> x = ExMLX.iota({:f, 32}, {1, 4, 1})
      iex> k = ExMLX.full(1.0, {:f, 32}, {1, 2, 1})
      iex> ExMLX.conv(x, k) |> ExMLX.to_list()
      [1.0, 3.0, 5.0]
  """
  @spec conv(Tensor.t(), Tensor.t(), keyword()) :: Tensor.t()
  def conv(input, kernel, opts \\ []) do
    %Tensor{ref: input, shape: shape} = tensor!(input, :input)
    %Tensor{ref: kernel} = tensor!(kernel, :kernel)
    opts = opts!(opts, [:groups, :input_dilation, :kernel_dilation, :padding, :strides])
    n = Kernel.max(tuple_size(shape) - 2, 0)
    strides = Keyword.get(opts, :strides, List.duplicate(1, n))
    padding = Keyword.get(opts, :padding, List.duplicate({0, 0}, n))
    kd = Keyword.get(opts, :kernel_dilation, List.duplicate(1, n))
    id = Keyword.get(opts, :input_dilation, List.duplicate(1, n))
    groups = Keyword.get(opts, :groups, 1)
    Call.run(&Native.conv(&1, input, kernel, strides, padding, kd, id, groups)) |> Tensor.wrap()
  end

  # ---------------------------------------------------------------------------
  # Indexing
  # ---------------------------------------------------------------------------

  @doc """
  Elements at `indices` (an integer tensor) along `axis`.

      iex> t = ExMLX.iota({:s, 32}, {5})
      iex> ExMLX.take(t, ExMLX.from_binary(<<4, 0, 4>>, {:u, 8}, {3}), 0) |> ExMLX.to_list()
      [4, 0, 4]
  """
  @spec take(Tensor.t(), Tensor.t(), integer()) :: Tensor.t()
  def take(tensor, indices, axis \\ 0) do
    %Tensor{ref: t} = tensor!(tensor, :tensor)
    %Tensor{ref: idx} = tensor!(indices, :indices)
    Call.run(&Native.take(&1, t, idx, axis)) |> Tensor.wrap()
  end

  @doc """
  `t[..., indices[...], ...]` along `axis`, `indices` having `t`'s rank.

      iex> t = ExMLX.iota({:s, 32}, {2, 3})
      iex> idx = ExMLX.from_binary(<<2, 1>>, {:u, 8}, {2, 1})
      iex> ExMLX.take_along_axis(t, idx, 1) |> ExMLX.to_list()
      [2, 4]
  """
  @spec take_along_axis(Tensor.t(), Tensor.t(), integer()) :: Tensor.t()
  def take_along_axis(tensor, indices, axis) do
    %Tensor{ref: t} = tensor!(tensor, :tensor)
    %Tensor{ref: idx} = tensor!(indices, :indices)
    Call.run(&Native.take_along_axis(&1, t, idx, axis)) |> Tensor.wrap()
  end

  @doc """
  Nx's gather: each row of `indices` (`{..., k}`) picks one position over
  `axes` (k of them, all axes by default); the result holds the slices there.

      iex> t = ExMLX.iota({:s, 32}, {2, 3})
      iex> idx = ExMLX.from_binary(<<1, 2, 0, 0>>, {:u, 8}, {2, 2})
      iex> ExMLX.gather(t, idx) |> ExMLX.to_list()
      [5, 0]
  """
  @spec gather(Tensor.t(), Tensor.t(), [integer()] | nil) :: Tensor.t()
  def gather(tensor, indices, axes \\ nil) do
    %Tensor{ref: t, shape: shape} = tensor!(tensor, :tensor)
    %Tensor{ref: idx} = tensor!(indices, :indices)
    axes = axes || Enum.to_list(0..(tuple_size(shape) - 1)//1)
    Call.run(&Native.gather(&1, t, idx, axes)) |> Tensor.wrap()
  end

  @doc """
  Writes `updates` at the positions given by the rows of `indices` over
  `axes` (Nx's `indexed_put`); `add: true` adds instead (`indexed_add`,
  repeated positions accumulate).

      iex> t = ExMLX.full(0, {:s, 32}, {3})
      iex> idx = ExMLX.from_binary(<<0, 2, 2>>, {:u, 8}, {3, 1})
      iex> upd = ExMLX.full(1, {:s, 32}, {3})
      iex> ExMLX.scatter(t, idx, upd, add: true) |> ExMLX.to_list()
      [1, 0, 2]
  """
  @spec scatter(Tensor.t(), Tensor.t(), Tensor.t(), keyword()) :: Tensor.t()
  def scatter(tensor, indices, updates, opts \\ []) do
    %Tensor{ref: t, shape: shape} = tensor!(tensor, :tensor)
    %Tensor{ref: idx} = tensor!(indices, :indices)
    %Tensor{ref: upd} = tensor!(updates, :updates)
    opts = opts!(opts, [:add, :axes])
    axes = Keyword.get_lazy(opts, :axes, fn -> Enum.to_list(0..(tuple_size(shape) - 1)//1) end)

    Call.run(&Native.scatter(&1, t, idx, upd, axes, Keyword.get(opts, :add, false)))
    |> Tensor.wrap()
  end

  # ---------------------------------------------------------------------------
  # Sorting and cumulative operations
  # ---------------------------------------------------------------------------

  @doc """
  Sorted along `:axis` (default the last); `direction: :desc` for descending.

      iex> ExMLX.from_binary(<<3, 1, 2>>, {:u, 8}, {3}) |> ExMLX.sort(direction: :desc) |> ExMLX.to_list()
      [3, 2, 1]
  """
  @spec sort(Tensor.t(), keyword()) :: Tensor.t()
  def sort(t, opts \\ []) do
    tensor!(t, :tensor)
    opts = opts!(opts, [:axis, :direction])
    sort_call(t, opts, false)
  end

  @doc """
  Indices that sort along `:axis` (default the last); stable in both
  directions (equal elements keep their order).

      iex> ExMLX.from_binary(<<2, 1, 2>>, {:u, 8}, {3}) |> ExMLX.argsort(direction: :desc) |> ExMLX.to_list()
      [0, 2, 1]
  """
  @spec argsort(Tensor.t(), keyword()) :: Tensor.t()
  def argsort(t, opts \\ []) do
    tensor!(t, :tensor)
    opts = opts!(opts, [:axis, :direction])
    sort_call(t, opts, true)
  end

  defp sort_call(%Tensor{ref: ref}, opts, indices?) do
    axis = Keyword.get(opts, :axis, -1)
    desc = Keyword.get(opts, :direction, :asc) == :desc
    Call.run(&Native.sort(&1, ref, axis, desc, indices?)) |> Tensor.wrap()
  end

  @doc """
  The `k` largest elements along the last axis (largest first) and their indices.

      iex> {values, indices} = ExMLX.top_k(ExMLX.from_binary(<<5, 9, 1, 9>>, {:u, 8}, {4}), 2)
      iex> {ExMLX.to_list(values), ExMLX.to_list(indices)}
      {[9, 9], [1, 3]}
  """
  @spec top_k(Tensor.t(), non_neg_integer()) :: {Tensor.t(), Tensor.t()}
  def top_k(tensor, k) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    [values, indices] = Call.run(&Native.top_k(&1, ref, k))
    {Tensor.wrap(values), Tensor.wrap(indices)}
  end

  @doc """
  Partitions along `:axis` around the `kth` element: it lands where a full
  sort would put it, smaller elements before, others after (in any order).

      iex> t = ExMLX.from_binary(<<5, 1, 4, 2, 3>>, {:u, 8}, {5})
      iex> ExMLX.partition(t, 2) |> ExMLX.to_list() |> Enum.at(2)
      3
  """
  @spec partition(Tensor.t(), non_neg_integer(), keyword()) :: Tensor.t()
  def partition(tensor, kth, opts \\ []) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    opts = opts!(opts, [:axis])
    Call.run(&Native.partition(&1, ref, kth, Keyword.get(opts, :axis, -1))) |> Tensor.wrap()
  end

  for {op, step} <- [
        cumulative_sum: &+/2,
        cumulative_product: &*/2,
        cumulative_min: &Kernel.min/2,
        cumulative_max: &Kernel.max/2
      ] do
    @doc """
    `#{op}` along `:axis` (default 0); `reverse: true` runs from the end.

        iex> ExMLX.from_binary(<<1, 3, 2>>, {:u, 8}, {3}) |> ExMLX.#{op}() |> ExMLX.to_list()
        #{inspect(Enum.scan([1, 3, 2], &step.(&2, &1)))}
    """
    @spec unquote(op)(Tensor.t(), keyword()) :: Tensor.t()
    def unquote(op)(tensor, opts \\ []) do
      %Tensor{ref: ref} = tensor!(tensor, :tensor)
      opts = opts!(opts, [:axis, :reverse])
      axis = Keyword.get(opts, :axis, 0)
      reverse = Keyword.get(opts, :reverse, false)
      Call.run(&Native.cumulative(&1, unquote(op), ref, axis, reverse)) |> Tensor.wrap()
    end
  end

  # ---------------------------------------------------------------------------
  # Fourier transforms (ExMLX.FFT has them all)
  # ---------------------------------------------------------------------------

  for op <- [:fft, :ifft, :rfft, :irfft] do
    @doc deprecated: "Use ExMLX.FFT.#{op}/2 instead"
    @doc """
    `ExMLX.FFT.#{op}/2` with its `:n` option named `:length`; kept for
    existing callers. (The transforms of a constant, worked out by hand:
    all the weight at frequency 0.)

        iex> ExMLX.full(1.0, {:f, 32}, {4}) |> ExMLX.#{op}(length: 4) |> ExMLX.to_list()
        #{%{fft: "[{4.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}]", ifft: "[{1.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}]", rfft: "[{4.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}]", irfft: "[1.0, 0.0, 0.0, 0.0]"}[op]}
    """
    @spec unquote(op)(Tensor.t(), keyword()) :: Tensor.t()
    def unquote(op)(tensor, opts \\ []) do
      tensor!(tensor, :tensor)
      opts = opts!(opts, [:length, axis: -1])
      ExMLX.FFT.unquote(op)(tensor, n: opts[:length], axis: opts[:axis])
    end
  end

  for op <- [:fft2, :ifft2] do
    @doc deprecated: "Use ExMLX.FFT.#{op}/2 instead"
    @doc """
    `ExMLX.FFT.#{op}/2` with its `:s` option named `:lengths`; kept for
    existing callers.

        iex> ExMLX.full(1.0, {:f, 32}, {2, 2}) |> ExMLX.#{op}(lengths: [2, 2]) |> ExMLX.to_list()
        #{%{fft2: "[{4.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}]", ifft2: "[{1.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}]"}[op]}
    """
    @spec unquote(op)(Tensor.t(), keyword()) :: Tensor.t()
    def unquote(op)(tensor, opts \\ []) do
      tensor!(tensor, :tensor)
      opts = opts!(opts, [:lengths, axes: [-2, -1]])
      ExMLX.FFT.unquote(op)(tensor, s: opts[:lengths], axes: opts[:axes])
    end
  end

  defp made_here({:ok, native}), do: Tensor.wrap(native)
  defp made_here(error), do: Call.value(error)
end
