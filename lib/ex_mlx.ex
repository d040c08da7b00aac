defmodule ExMLX do
  @moduledoc """
  Apple's MLX arrays from Elixir, without Nx.

  This is the low-level API the Nx backend is built on. Every operation is
  an entry of the op table (`native/ex_mlx/core/src/ops/table.rs`), from
  which its function here is generated, documentation included. Tensors are
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
  at the call too. The element-wise operations (`unary_ops/0`: `sin/1`,
  `exp/1`, ...; `binary_ops/0`: `add/2`, `multiply/2`, `less/2`, ...) and
  `matmul/2` of floating-point operands do not wait: the shape and type of
  their result follow from the inputs' (broadcasting, MLX's type promotion),
  so they return at once and the worker catches up in the background. An error MLX raises for them (such as
  `:out_of_memory`) is raised where the result is used: `eval/1`,
  `to_binary/1`, `item/1`, or an operation on it. The reductions and the
  creation operations (`full/4`, `iota/3`, `eye/3`) do not wait either
  where their result's shape and type follow from their arguments; a
  creation past the memory limit is still refused at the call.
  """

  # abs/1, round/1, min/2 and max/2 are tensor operations here.
  import Kernel, except: [abs: 1, round: 1, min: 2, max: 2]

  import ExMLX.Args, only: [tensor!: 2, tensors!: 2, refs!: 2, opts!: 2]

  alias ExMLX.{Call, Native, Op, OpTable, Tensor}

  @typedoc "A tensor type, as Nx names it, or `:bool`."
  @type type :: Tensor.type()
  @type device :: Tensor.device()
  @type shape :: tuple()

  @doc """
  The device used when none is given: `config :ex_mlx, default_device: ...`
  when set, else `:gpu` where this MLX build has one (CUDA on Linux with
  an NVIDIA GPU, Metal on Apple Silicon), else `:cpu` — as MLX chooses its
  own default device.

      iex> ExMLX.default_device() == if(ExMLX.device_available?(:gpu), do: :gpu, else: :cpu)
      true
  """
  @spec default_device() :: device()
  def default_device do
    case Application.fetch_env(:ex_mlx, :default_device) do
      {:ok, device} -> device
      :error -> available_default()
    end
  end

  # (asked of MLX once per VM)
  defp available_default do
    case :persistent_term.get({__MODULE__, :available_default}, nil) do
      nil ->
        device = if device_available?(:gpu), do: :gpu, else: :cpu
        :persistent_term.put({__MODULE__, :available_default}, device)
        device

      device ->
        device
    end
  end

  @doc """
  The version of the MLX library the native library runs on (MLX's own
  `version()`; one of the releases the README lists as supported).

      iex> ExMLX.mlx_version() |> String.split(".") |> Enum.take(2)
      ["0", "32"]
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

      iex> t = ExMLX.from_binary(<<1, 2, 3, 4, 5, 6>>, {:u, 8}, {2, 3}, device: :cpu)
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
      :at_once -> Native.from_binary_at_once(binary, type, shape) |> made_at_once()
      :dirty -> Native.from_binary_at_once_dirty(binary, type, shape) |> made_at_once()
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
    ExMLX.Telemetry.span(:to_binary, fn -> Op.to_binary(ref) end)
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
  def shape(tensor), do: tensor |> info() |> elem(0)

  @doc """
  The tensor's type, as MLX reports it.

      iex> ExMLX.from_binary(<<0::16>>, {:bf, 16}, {}) |> ExMLX.type()
      {:bf, 16}
  """
  @spec type(Tensor.t()) :: type()
  def type(tensor), do: tensor |> info() |> elem(1)

  @doc """
  The device whose worker owns the tensor.

      iex> ExMLX.from_binary(<<1>>, :bool, {1}, device: :cpu) |> ExMLX.device()
      :cpu
  """
  @spec device(Tensor.t()) :: device()
  def device(tensor), do: tensor |> info() |> elem(2)

  # {shape, type, device} as the native tensor has them (waiting for a
  # deferred result, raising its error if it failed).
  defp info(tensor) do
    %Tensor{ref: ref} = tensor!(tensor, :tensor)
    Op.info(ref)
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
    if Op.deallocate(ref), do: :ok, else: :already_deallocated
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
  Whether the workers of `device`'s kind evaluate ahead of reads.

  An ExMLX op returns before its result is computed: MLX evaluates a graph of
  ops when a result is read. With evaluation ahead on, a worker starts
  evaluating the newest result it has built every 64 results and whenever
  it is about to sleep (MLX's `async_eval`: launched, not waited for), so
  the device computes while the
  caller goes on building, and a later read finds the work done or under way.
  Results and errors are the same either way; the difference is a result
  nobody reads is computed all the same. On by default for `:gpu`, where
  launching kernels while the caller builds the next ops pays; see
  `set_evaluate_ahead/2` and `config :ex_mlx, evaluate_ahead:`.

      iex> is_boolean(ExMLX.evaluate_ahead?(:cpu))
      true
  """
  @spec evaluate_ahead?(device()) :: boolean()
  def evaluate_ahead?(device), do: device |> Native.device_evaluate_ahead(nil) |> Call.value()

  @doc """
  Turns evaluation ahead of reads (see `evaluate_ahead?/1`) on or off for the
  workers of `device`'s kind; returns the previous setting. It applies to
  every stream of that kind, from the next op on.

  At start, `config :ex_mlx, evaluate_ahead: [cpu: boolean, gpu: boolean]`
  sets it (kinds not named keep their default).

      iex> previous = ExMLX.set_evaluate_ahead(:cpu, true)
      iex> ExMLX.evaluate_ahead?(:cpu)
      true
      iex> ExMLX.set_evaluate_ahead(:cpu, previous)
      true
  """
  @spec set_evaluate_ahead(device(), boolean()) :: boolean()
  def set_evaluate_ahead(device, on) when is_boolean(on),
    do: device |> Native.device_evaluate_ahead(on) |> Call.value()

  def set_evaluate_ahead(_device, on),
    do: raise(ArgumentError, "expected true or false for evaluation ahead, got: #{inspect(on)}")

  @doc """
  Whether ExMLX's own CPU kernels run where they apply: exactly rounded
  element-wise arithmetic of tensors that are already computed, computed at
  once on the calling thread; fused groups of such ops and small tensors
  known on the host inside compiled programs; a row times a matrix in one
  pass. They give MLX's bits (docs/numerics.md says which ops and why) and
  spare small calls a round trip through MLX's stream.

  On by default; `config :ex_mlx, cpu_kernels: false`, or
  `EX_MLX_CPU_KERNELS=false` in the environment, turns them off before
  ExMLX is loaded: every op is then MLX's own.

      iex> is_boolean(ExMLX.cpu_kernels?())
      true
  """
  @spec cpu_kernels?() :: boolean()
  def cpu_kernels?, do: Native.cpu_kernels_enabled()

  @doc """
  Whether float32 matrix products (and complex64 ones on CUDA) may run in
  TF32 on the GPU: about 3 decimal digits instead of float32's 7, several
  times faster on GPUs with tensor cores.

  ExMLX turns it off (Nx's f32 dot is a float32 dot), unlike MLX's own
  default. `config :ex_mlx, tf32: true`, or `MLX_ENABLE_TF32=1` in the
  environment, turns it on; either must be set before ExMLX is loaded (MLX
  reads the setting once). The CPU never uses TF32.

      iex> ExMLX.tf32?()
      false
  """
  @spec tf32?() :: boolean()
  def tf32?, do: System.get_env("MLX_ENABLE_TF32") not in [nil, "", "0"]

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
    Op.transfer(ref, device) |> Tensor.wrap()
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
    ExMLX.Telemetry.span(:item, fn -> Op.item(ref) end)
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
  # The ops of the op table
  # ---------------------------------------------------------------------------

  # Every op of native/ex_mlx/core/src/ops/table.rs is a function here,
  # generated from its entry (ExMLX.OpTable): the inputs are its first
  # arguments, then its parameters without a default, then those marked
  # positional (with their defaults), then a keyword list of the others;
  # its `///` lines are the documentation. Ops flagged `nx` are for
  # ExMLX.Backend and ExMLX.FFT only; those flagged `custom` are written by
  # hand below. Element-wise ops, reductions, `matmul` and the creation ops
  # return at once when their result can be predicted (binary_op/3,
  # unary_op/2, reduction_op/3, creation_op/2).

  kind_types = %{
    Int: quote(do: integer()),
    OptInt: quote(do: integer() | nil),
    Ints: quote(do: [integer()] | tuple()),
    OptInts: quote(do: [integer()] | nil),
    Bool: quote(do: boolean()),
    Float: quote(do: number()),
    Type: quote(do: type()),
    Shape: quote(do: shape()),
    OptPairs: quote(do: [{integer(), integer()}] | nil),
    PadConfig: quote(do: [tuple()]),
    Scalar: quote(do: number() | atom() | {number(), number()}),
    Device: quote(do: device()),
    Direction: quote(do: :asc | :desc),
    Triangular: quote(do: nil | :lower | :upper),
    Str: quote(do: String.t())
  }

  for %{name: name, flags: flags} = entry <- OpTable.entries(),
      :nx not in flags and :custom not in flags do
    {inputs, input_types, refs} =
      case entry.inputs do
        {:list, list} ->
          var = Macro.var(list, nil)
          {[var], [quote(do: [Tensor.t()])], quote(do: tensors!(unquote(var), unquote(list)))}

        names ->
          vars = Enum.map(names, &Macro.var(&1, nil))

          refs =
            Enum.zip_with(names, vars, fn n, v -> quote(do: tensor!(unquote(v), unquote(n))) end)

          {vars, Enum.map(names, fn _ -> quote(do: Tensor.t()) end), refs}
      end

    required = Enum.filter(entry.params, &(&1.default == nil))
    positional = Enum.filter(entry.params, &(&1.default != nil and &1.positional))
    options = Enum.filter(entry.params, &(&1.default != nil and not &1.positional))

    if positional != [] and options != [] do
      raise CompileError,
        description: "op table: #{name} has both positional defaults and options"
    end

    opts_var = Macro.var(:opts, nil)

    args =
      inputs ++
        Enum.map(required, &Macro.var(&1.name, nil)) ++
        Enum.map(positional, fn p ->
          {:\\, [], [Macro.var(p.name, nil), Code.string_to_quoted!(p.default)]}
        end) ++ if(options == [], do: [], else: [{:\\, [], [opts_var, []]}])

    arg_types =
      input_types ++
        Enum.map(required ++ positional, &Map.fetch!(kind_types, &1.kind)) ++
        if(options == [], do: [], else: [quote(do: keyword())])

    option_defaults = Enum.map(options, &{&1.name, Code.string_to_quoted!(&1.default)})

    params =
      Enum.map(entry.params, fn p ->
        if p in options,
          do: quote(do: Keyword.fetch!(unquote(opts_var), unquote(p.name))),
          else: Macro.var(p.name, nil)
      end)

    return_type =
      case entry.results do
        [_] -> quote(do: Tensor.t())
        many -> {:{}, [], Enum.map(many, fn _ -> quote(do: Tensor.t()) end)}
      end

    check_opts =
      if options == [],
        do: nil,
        else: quote(do: unquote(opts_var) = opts!(unquote(opts_var), unquote(option_defaults)))

    body =
      cond do
        entry.family == :binary or name == :matmul ->
          [a, b] = inputs
          quote(do: binary_op(unquote(name), unquote(a), unquote(b)))

        entry.family == :unary ->
          [a] = inputs
          quote(do: unary_op(unquote(name), unquote(a)))

        name in ExMLX.Prediction.reductions() ->
          [a] = inputs
          quote(do: reduction_op(unquote(name), unquote(a), unquote(params)))

        name in ExMLX.Prediction.creations() ->
          quote(do: creation_op(unquote(name), unquote(params)))

        true ->
          quote(do: run_op(unquote(name), unquote(refs), unquote(params)))
      end

    @doc (if options == [] do
            entry.doc
          else
            entry.doc <>
              "\n\nOptions, with their defaults: " <>
              Enum.map_join(options, ", ", &"`#{&1.name}: #{&1.default}`") <> "."
          end)
    @spec unquote(name)(unquote_splicing(arg_types)) :: unquote(return_type)
    def unquote(name)(unquote_splicing(args)) do
      unquote(check_opts)
      unquote(body)
    end
  end

  @doc "The element-wise unary operations, each a function of this module."
  def unary_ops, do: unquote(OpTable.names(:unary))

  @doc "The element-wise binary operations, each a function of this module."
  def binary_ops, do: unquote(OpTable.names(:binary))

  # Runs op `name` on `inputs` (tensors) and wraps its result(s), on the
  # inputs' device. (An op MLX runs on the CPU only, `cpu` flag, runs on a
  # CPU stream of a GPU's worker for GPU tensors: ops/table.rs, `Op::apply`.)
  defp run_op(name, inputs, params) do
    case Op.run(name, Enum.map(inputs, & &1.ref), params) do
      many when is_list(many) -> many |> Enum.map(&Tensor.wrap/1) |> List.to_tuple()
      one -> Tensor.wrap(one)
    end
  end

  # Element-wise ops, reductions, `matmul` and the creation ops return at
  # once where their result's shape and type follow from the inputs' or the
  # parameters (ExMLX.Prediction): the worker
  # builds the graph node in the background and only reading data waits. An
  # error MLX raises there (say, running out of memory) surfaces where the
  # result is used. Elsewhere they wait for the worker's answer, so MLX's own
  # error (shapes that do not broadcast, say) is raised at the call.
  defp binary_op(op, a, b) do
    refs = [tensor!(a, :a).ref, tensor!(b, :b).ref]

    prediction =
      if op == :matmul, do: ExMLX.Prediction.matmul(a, b), else: ExMLX.Prediction.binary(op, a, b)

    predicted_op(op, refs, [], prediction)
  end

  defp unary_op(op, a) do
    ref = tensor!(a, :tensor).ref
    predicted_op(op, [ref], [], ExMLX.Prediction.unary(op, a))
  end

  defp reduction_op(op, a, params) do
    ref = tensor!(a, :tensor).ref
    predicted_op(op, [ref], params, ExMLX.Prediction.reduce(op, a, params))
  end

  defp creation_op(op, params) do
    predicted_op(op, [], params, ExMLX.Prediction.creation(op, params))
  end

  # The op deferred with its predicted result, or run and waited for.
  defp predicted_op(op, refs, params, {:ok, shape, type}) do
    {ref, device} = Op.defer_exact(op, refs, params, type, shape)
    %Tensor{ref: ref, shape: shape, type: type, device: device}
  end

  defp predicted_op(op, refs, params, :unknown), do: Op.run(op, refs, params) |> Tensor.wrap()

  # ---------------------------------------------------------------------------
  # Ops whose functions are written here (flagged `custom` in the table)
  # ---------------------------------------------------------------------------

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
    Op.run(:dynamic_slice, [ref, s], [lengths]) |> Tensor.wrap()
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
    Op.run(:put_slice, [ref, s, update], []) |> Tensor.wrap()
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
    Op.run(:pad, [ref, value], [widths]) |> Tensor.wrap()
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
    Op.run(:einsum, refs, [subscripts]) |> Tensor.wrap()
  end

  @doc """
  A factorisation or inverse by name, as a list of tensors: `:cholesky` →
  `[l]`, `:qr` → `[q, r]`, `:eigh` → `[eigenvalues, eigenvectors]`, `:svd` →
  `[u, s, vt]`, `:lu` → `[p, l, u]`, `:inv`, `:tri_inv` → `[inverse]`,
  `:determinant` → `[det]`; `opts` as the function of that name takes them
  (`cholesky/2`, ...).

      iex> a = ExMLX.from_binary(<<4.0::32-float-little, 2.0::32-float-little, 2.0::32-float-little, 5.0::32-float-little>>, {:f, 32}, {2, 2})
      iex> [l] = ExMLX.linalg(:cholesky, a)
      iex> ExMLX.to_list(l)
      [2.0, 0.0, 1.0, 2.0]
  """
  @linalg [:cholesky, :qr, :eigh, :svd, :lu, :inv, :tri_inv, :determinant]
  @spec linalg(atom(), Tensor.t(), keyword()) :: [Tensor.t()]
  def linalg(op, t, opts \\ [])

  def linalg(op, t, opts) when op in @linalg do
    args = if OpTable.fetch!(op).params == [], do: [t], else: [t, opts]

    case apply(__MODULE__, op, args) do
      %Tensor{} = one -> [one]
      many -> Tuple.to_list(many)
    end
  end

  def linalg(op, _t, _opts) do
    raise ArgumentError,
          "op: expected one of #{Enum.map_join(@linalg, ", ", &inspect/1)}, got: #{inspect(op)}"
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

  defp made_at_once({:ok, native}), do: Tensor.wrap(native)
  defp made_at_once(error), do: Call.value(error)
end
