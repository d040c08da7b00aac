if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend do
    @moduledoc """
    An `Nx.Backend` running on Apple's MLX.

        Nx.default_backend(ExMLX.Backend)
        Nx.default_backend({ExMLX.Backend, device: :gpu})

        Nx.iota({3}) |> Nx.add(1) |> Nx.to_list()
        #=> [1, 2, 3]

    Tensors live on `:cpu` (the default) or `:gpu` (Metal on macOS, CUDA on
    Linux builds that have it); `Nx.backend_transfer/2` moves them between
    devices and backends. Operations are lazy MLX graphs, computed when data
    is read.

    A slice shares its source's memory when its elements lie together in it
    (some rows of a matrix). One that would skip elements between its own
    (some columns) gets a buffer of its own: a strided view would keep its
    whole source alive and be copied again by every matrix product reading
    it (as when Bumblebee splits a GPT-2's fused query/key/value weight in
    three). Inside `ExMLX.Compiler` programs slices stay views.

    ## Types

    Every Nx type is supported: `{:f, 64}` is real float64 on `:cpu` (MLX
    has no float64 on the GPU: asking for it there raises). Types MLX lacks
    are stored widened and converted back exactly when read: `{:u, 2}`,
    `{:u, 4}` as `{:u, 8}`; `{:s, 2}`, `{:s, 4}` as `{:s, 8}`; `{:f, 8}` and
    `{:f8_e4m3fn, 8}` as `{:f, 16}` (which holds every f8 value). Results are
    rounded back to the Nx type when read. `{:c, 128}` is not supported.
    Sums, products, means and cumulative or window sums and products of
    `{:f, 16}` and `{:bf, 16}` tensors accumulate in float32 and round once
    to the tensor's type, as Nx.BinaryBackend rounds its f64 accumulation
    (MLX's CPU kernels accumulate in the 16-bit type itself).

    `reduce/5` and `window_reduce/6`, whose reducers are arbitrary Elixir
    functions, run on `Nx.BinaryBackend` and return to ExMLX.
    """

    @behaviour Nx.Backend

    @enforce_keys [:ref, :device]
    defstruct [:ref, :device, quantization: nil]

    # (a quantized tensor, ExMLX.Quantization, has no `ref` of its own: any
    # path that reads `ref` without going through `ref/1` fails loudly)
    @type t :: %__MODULE__{
            ref: reference() | nil,
            device: :cpu | :gpu,
            quantization: ExMLX.Quantization.t() | nil
          }

    alias Nx.Tensor, as: T
    alias ExMLX.Op

    # abs/2, round/2, min/3, max/3 ... are backend callbacks here.
    import Kernel, except: [abs: 1, round: 1, min: 2, max: 2]
    import ExMLX.Backend.Refs, except: [storage_type: 1]

    # -------------------------------------------------------------------------
    # Types and conversion helpers
    # -------------------------------------------------------------------------

    @doc false
    # The MLX type an Nx type is stored as.
    defdelegate storage_type(type), to: ExMLX.Backend.Refs

    # -------------------------------------------------------------------------
    # Creation
    # -------------------------------------------------------------------------

    @impl true
    def init(opts) do
      opts = Keyword.validate!(opts, device: default_device())

      case opts[:device] do
        device when device in [:cpu, :gpu] ->
          [device: device]

        other ->
          raise ArgumentError,
                "ExMLX.Backend: device must be :cpu or :gpu, got: #{inspect(other)}"
      end
    end

    @impl true
    def constant(%T{shape: shape, type: type} = out, number, opts) do
      device = opts_device(opts)
      params = [scalar_value(number, type), storage_type(type), shape, device]
      created(out, :full, params, device)
    end

    @impl true
    def from_binary(%T{shape: shape, type: type} = out, binary, opts) do
      device = opts_device(opts)
      storage = storage_type(type)
      binary = if widened?(type), do: convert_binary(binary, shape, type, storage), else: binary
      {ref, device} = Op.from_binary_deferred(binary, storage, shape, device, storage)
      %{out | data: %__MODULE__{ref: ref, device: device}}
    end

    # Converts element data between an Nx type and its storage type with
    # Nx.BinaryBackend's own conversion rules (exact widening; rounding back).
    defp convert_binary(binary, shape, from, to) do
      names = List.duplicate(nil, tuple_size(shape))
      template = %T{type: from, shape: shape, names: names, data: nil}

      template
      |> Nx.BinaryBackend.from_binary(binary, [])
      |> Nx.as_type(to)
      |> Nx.to_binary()
    end

    @impl true
    def eye(%T{shape: shape, type: type} = out, opts) do
      device = opts_device(opts)
      rank = tuple_size(shape)
      n = elem(shape, rank - 2)
      m = elem(shape, rank - 1)
      eye = op(:eye, [], [n, storage_type(type), m, device], storage_type(type))

      if rank == 2,
        do: wrap(eye, out),
        else: defer(out, :broadcast_to, [eye], [shape])
    end

    @impl true
    def iota(%T{shape: shape, type: type} = out, axis, opts) do
      device = opts_device(opts)
      created(out, :iota, [storage_type(type), shape, axis, device], device)
    end

    # `out` made by creation op `name` on `device` (a large one is made at
    # each run of a program being recorded: ExMLX.Op.defer_created/5)
    defp created(%T{shape: shape, type: type} = out, name, params, device) do
      {_, bits} = storage = storage_type(type)
      bytes = Tuple.product(shape) * div(bits, 8)
      {ref, device} = Op.defer_created(name, params, storage, bytes, device)
      %{out | data: %__MODULE__{ref: ref, device: device}}
    end

    # -------------------------------------------------------------------------
    # ExMLX tensors and Nx tensors
    # -------------------------------------------------------------------------

    @doc """
    The `ExMLX.Tensor` behind an Nx tensor, to use ExMLX's own functions
    on it. A tensor on another backend is copied to ExMLX first (on the
    default device). No data is copied for an `ExMLX.Backend` tensor: both
    share the MLX array.

    Types MLX lacks come back as the type ExMLX stores them in (`{:u, 4}` as
    `{:u, 8}`, `{:f, 8}` as `{:f, 16}`, ...; see the module documentation).

        iex> t = Nx.tensor([1.0, 2.0], backend: ExMLX.Backend)
        iex> ExMLX.Backend.from_nx(t) |> ExMLX.add(ExMLX.full(1.0, {:f, 32}, {})) |> ExMLX.to_list()
        [2.0, 3.0]
    """
    @spec from_nx(Nx.Tensor.t()) :: ExMLX.Tensor.t()
    def from_nx(%T{data: %Nx.TemplateBackend{}} = t) do
      raise ArgumentError,
            "tensor: expected a tensor with data, got a template: #{inspect(t)}"
    end

    def from_nx(%T{shape: shape, type: type} = t) do
      %T{data: %__MODULE__{ref: ref, device: device}} = to_ex_mlx_backend(t)
      %ExMLX.Tensor{ref: ref, shape: shape, type: storage_type(type), device: device}
    end

    def from_nx(other),
      do: raise(ArgumentError, "tensor: expected an Nx.Tensor, got: #{inspect(other)}")

    defp to_ex_mlx_backend(%T{data: %__MODULE__{quantization: %ExMLX.Quantization{}}} = t),
      do: ExMLX.Quantization.dequantize(t)

    defp to_ex_mlx_backend(%T{data: %__MODULE__{}} = t), do: t
    defp to_ex_mlx_backend(t), do: Nx.backend_copy(t, {__MODULE__, device: default_device()})

    @doc """
    An `ExMLX.Tensor` as an Nx tensor on `ExMLX.Backend`, sharing its MLX
    array. Nx has no boolean type: a `:bool` tensor becomes `{:u, 8}` (0 and
    1).

        iex> t = ExMLX.iota({:s, 32}, {3})
        iex> ExMLX.Backend.to_nx(t) |> Nx.multiply(2) |> Nx.to_list()
        [0, 2, 4]
    """
    @spec to_nx(ExMLX.Tensor.t()) :: Nx.Tensor.t()
    def to_nx(%ExMLX.Tensor{type: :bool} = t), do: t |> ExMLX.as_type({:u, 8}) |> to_nx()

    def to_nx(%ExMLX.Tensor{ref: ref, shape: shape, type: type, device: device}) do
      %T{
        data: %__MODULE__{ref: ref, device: device},
        shape: shape,
        type: type,
        names: List.duplicate(nil, tuple_size(shape))
      }
    end

    def to_nx(other),
      do: raise(ArgumentError, "tensor: expected an ExMLX.Tensor, got: #{inspect(other)}")

    # -------------------------------------------------------------------------
    # Memory, devices and other backends
    # -------------------------------------------------------------------------

    @impl true
    def backend_deallocate(%T{data: %__MODULE__{quantization: %ExMLX.Quantization{} = q}}) do
      freed = for ref <- ExMLX.Quantization.stored_refs(q), do: Op.deallocate(ref)
      if Enum.any?(freed), do: :ok, else: :already_deallocated
    end

    def backend_deallocate(%T{data: %__MODULE__{ref: ref}}) do
      if Op.deallocate(ref), do: :ok, else: :already_deallocated
    end

    @impl true
    def backend_copy(%T{} = tensor, backend, opts), do: move(tensor, backend, opts)

    @impl true
    def backend_transfer(%T{} = tensor, backend, opts) do
      result = move(tensor, backend, opts)
      if result.data != tensor.data, do: backend_deallocate(tensor)
      result
    end

    defp move(%T{} = tensor, __MODULE__, opts) do
      device = opts_device(opts)

      if device_of(tensor) == device,
        do: tensor,
        else: Op.transfer(ref(tensor), device) |> wrap(tensor)
    end

    defp move(%T{} = tensor, backend, opts) do
      backend.from_binary(tensor, to_binary(tensor, Nx.size(tensor)), opts)
    end

    @impl true
    def to_batched(%T{shape: out_shape} = out, %T{shape: shape} = tensor, opts) do
      batch = elem(out_shape, 0)
      total = elem(shape, 0)
      remainder = rem(total, batch)
      rest = shape |> Tuple.delete_at(0) |> Tuple.to_list()

      tensor =
        case {remainder, Keyword.get(opts, :leftover, :repeat)} do
          {0, _} ->
            tensor

          {_, :discard} ->
            tensor

          {_, :repeat} ->
            missing = batch - remainder

            head =
              slice(
                %{tensor | shape: List.to_tuple([missing | rest])},
                tensor,
                [0 | Enum.map(rest, fn _ -> 0 end)],
                [missing | rest],
                Enum.map([missing | rest], fn _ -> 1 end)
              )

            concatenate(
              %{tensor | shape: List.to_tuple([total + missing | rest])},
              [tensor, head],
              0
            )
        end

      count = div(elem(tensor.shape, 0), batch)

      for i <- 0..(count - 1)//1 do
        starts = [i * batch | Enum.map(rest, fn _ -> 0 end)]
        slice(out, tensor, starts, Tuple.to_list(out_shape), Enum.map(starts, fn _ -> 1 end))
      end
    end

    @impl true
    def to_binary(%T{type: type, shape: shape} = tensor, limit) do
      r = ref(tensor)
      binary = ExMLX.Telemetry.span(:to_binary, fn -> Op.to_binary(r) end)

      binary =
        if widened?(type),
          do: convert_binary(binary, shape, storage_type(type), type),
          else: binary

      {_, bits} = type
      wanted = limit * bits

      case binary do
        <<head::bitstring-size(wanted), _::bitstring>> -> head
        _ -> binary
      end
    end

    @impl true
    def inspect(%T{} = tensor, %Inspect.Opts{} = inspect_opts) do
      limit = if inspect_opts.limit == :infinity, do: :infinity, else: inspect_opts.limit + 1
      binary = to_binary(tensor, Kernel.min(limit, Nx.size(tensor)))
      doc = Nx.Backend.inspect(tensor, binary, inspect_opts)

      if Application.get_env(:ex_mlx, :add_backend_on_inspect, true) do
        quantized =
          if ExMLX.Quantization.quantized?(tensor),
            do: ", " <> ExMLX.Quantization.describe(tensor),
            else: ""

        Inspect.Algebra.concat([
          "ExMLX.Backend<#{device_of(tensor)}#{quantized}>",
          Inspect.Algebra.line(),
          doc
        ])
      else
        doc
      end
    end

    @impl true
    def from_pointer(_pointer, _type, _shape, _opts, _backend_opts) do
      raise ArgumentError,
            "ExMLX.Backend.from_pointer/5 is not supported: reading a caller-given address " <>
              "could crash the VM if it is wrong, and MLX has no IPC handles; " <>
              "use Nx.backend_transfer/2 or ExMLX.Wire instead"
    end

    @impl true
    def to_pointer(%T{} = tensor, opts) do
      case Keyword.get(opts, :mode, :local) do
        :local ->
          r = ref(tensor)
          {address, size} = Op.data_pointer(r)
          %Nx.Pointer{kind: :local, address: address, data_size: size}

        mode ->
          raise ArgumentError,
                "ExMLX.Backend.to_pointer/2 supports mode: :local only (MLX has no IPC handles), got: #{inspect(mode)}"
      end
    end

    # Whether a slice of a row-major tensor of `shape` skips elements between
    # its own: an axis steps over some, or an axis before the last one cut
    # short holds more than one index.
    defp strided_slice?(shape, lengths, strides) do
      dims = Tuple.to_list(shape)
      stepped = Enum.zip(lengths, strides) |> Enum.any?(fn {l, s} -> s > 1 and l > 1 end)

      case Enum.zip(dims, lengths)
           |> Enum.with_index()
           |> Enum.filter(fn {{d, l}, _} -> l < d end) do
        [] ->
          stepped

        cut ->
          {_, last_cut} = List.last(cut)
          stepped or Enum.any?(Enum.take(lengths, last_cut), &(&1 > 1))
      end
    end

    # -------------------------------------------------------------------------
    # Types
    # -------------------------------------------------------------------------

    @impl true
    def as_type(%T{type: out_type} = out, %T{type: in_type} = tensor) do
      r = ref(tensor)
      float_in? = Nx.Type.float?(in_type) or Nx.Type.complex?(in_type)
      int_out? = Nx.Type.integer?(out_type)

      r =
        if float_in? and int_out? do
          # Nx: NaN -> 0, ±inf -> the type's extremes, others truncate.
          safe_float_to_int(r, tensor, out_type)
        else
          r
        end

      defer(out, :as_type, [r], [storage_type(out_type)])
    end

    defp safe_float_to_int(r, %T{type: in_type} = tensor, out_type) do
      device = device_of(tensor)
      r = if Nx.Type.complex?(in_type), do: op(:real, [r], []), else: r
      real_type = if Nx.Type.complex?(in_type), do: {:f, 32}, else: storage_type(in_type)
      zero = scalar_ref(0, real_type, device)
      nan? = op(:is_nan, [r], [])
      r = op(:select, [nan?, zero, r], [])
      {min, max} = int_limits(out_type)
      # clamp in f64 on the CPU (exact for every limit below 2^53; beyond, the
      # nearest double, which casts to the limit), else in the tensor's type.
      clamp_type = if device == :cpu, do: {:f, 64}, else: real_type
      wide = op(:as_type, [r], [clamp_type])
      lo = scalar_ref(min * 1.0, clamp_type, device)
      hi = scalar_ref(max * 1.0, clamp_type, device)
      clipped = op(:clip, [wide, lo, hi], [])
      int_max = scalar_ref(max, storage_type(out_type), device)
      int_min = scalar_ref(min, storage_type(out_type), device)
      as_int = op(:as_type, [clipped], [storage_type(out_type)])
      pos_inf? = op(:greater_equal, [wide, hi], [])
      neg_inf? = op(:less_equal, [wide, lo], [])
      as_int = op(:select, [pos_inf?, int_max, as_int], [])
      op(:select, [neg_inf?, int_min, as_int], [])
    end

    defp int_limits({:u, bits}), do: {0, Bitwise.bsl(1, bits) - 1}
    defp int_limits({:s, bits}), do: {-Bitwise.bsl(1, bits - 1), Bitwise.bsl(1, bits - 1) - 1}

    @impl true
    def bitcast(%T{type: out_type} = out, %T{type: in_type} = tensor) do
      if widened?(out_type) or widened?(in_type) do
        binary = to_binary(tensor, Nx.size(tensor))
        from_binary(out, binary, device: device_of(tensor))
      else
        defer(out, :bitcast, [ref(tensor)], [out_type])
      end
    end

    # -------------------------------------------------------------------------
    # Shape
    # -------------------------------------------------------------------------

    @impl true
    # A quantized tensor's rows regrouped, its last (grouped) axis kept: the
    # same reshape of its packed values, scales and biases (loading a
    # checkpoint whose fused layers are split: ExMLX.Quantization).
    def reshape(
          %T{shape: shape} = out,
          %T{shape: in_shape, data: %__MODULE__{quantization: %ExMLX.Quantization{} = q}}
        )
        when not q.transposed and tuple_size(shape) >= 2 and
               elem(shape, tuple_size(shape) - 1) == elem(in_shape, tuple_size(in_shape) - 1) do
      leading = shape |> Tuple.delete_at(tuple_size(shape) - 1) |> Tuple.to_list()
      columns = elem(in_shape, tuple_size(in_shape) - 1)
      rows = &ExMLX.reshape(&1, List.to_tuple(leading ++ [&2]))
      quantized(out, ExMLX.Quantization.map_stored(q, columns, rows))
    end

    def reshape(%T{shape: shape} = out, tensor),
      do: defer(out, :reshape, [ref(tensor)], [shape])

    @impl true
    def squeeze(out, tensor, axes),
      do: defer(out, :squeeze, [ref(tensor)], [axes])

    @impl true
    def broadcast(%T{shape: shape} = out, %T{shape: in_shape} = tensor, shape, axes) do
      # Put each input axis at its position in `shape` (size 1 elsewhere), then broadcast.
      rank = tuple_size(shape)
      positions = Map.new(Enum.with_index(axes), fn {axis, i} -> {axis, elem(in_shape, i)} end)
      aligned = List.to_tuple(for i <- 0..(rank - 1)//1, do: Map.get(positions, i, 1))
      r = op(:reshape, [ref(tensor)], [aligned])
      defer(out, :broadcast_to, [r], [shape])
    end

    @impl true
    # A quantized matrix transposed: the same stored values, read the other
    # way (ExMLX.Quantization's `transposed`).
    def transpose(
          out,
          %T{shape: {_, _}, data: %__MODULE__{quantization: %ExMLX.Quantization{} = q}},
          [1, 0]
        ),
        do: quantized(out, %{q | transposed: not q.transposed})

    def transpose(out, tensor, axes),
      do: defer(out, :transpose, [ref(tensor)], [axes])

    @impl true
    def pad(%T{type: type} = out, tensor, pad_value, config) do
      t = ref_as(tensor, type)
      v = ref_as(pad_value, type)
      defer(out, :pad, [t, v], [config])
    end

    @impl true
    def reverse(out, tensor, axes), do: defer(out, :flip, [ref(tensor)], [axes])

    @impl true
    # Whole rows of a quantized tensor (its last, grouped axis kept whole):
    # the same rows of its packed values, scales and biases.
    def slice(
          out,
          %T{shape: shape, data: %__MODULE__{quantization: %ExMLX.Quantization{} = q}} = tensor,
          starts,
          lengths,
          strides
        )
        when not q.transposed and tuple_size(shape) >= 2 do
      last = tuple_size(shape) - 1

      if Enum.all?(starts, &is_integer/1) and Enum.all?(strides, &(&1 == 1)) and
           Enum.at(starts, last) == 0 and Enum.at(lengths, last) == elem(shape, last) do
        leading =
          for {s, l, d} <- Enum.zip([starts, lengths, Tuple.to_list(shape)]) |> Enum.take(last),
              do: {s |> Kernel.max(0) |> Kernel.min(d - l), l}

        {begins, stops} = Enum.unzip(for {s, l} <- leading, do: {s, s + l})
        rows = &ExMLX.slice(&1, begins ++ [0], stops ++ [&2])
        quantized(out, ExMLX.Quantization.map_stored(q, elem(shape, last), rows))
      else
        dense_slice(out, tensor, starts, lengths, strides)
      end
    end

    def slice(out, tensor, starts, lengths, strides),
      do: dense_slice(out, tensor, starts, lengths, strides)

    defp dense_slice(out, %T{shape: shape} = tensor, starts, lengths, strides) do
      r = ref(tensor)

      if Enum.all?(starts, &is_integer/1) do
        dims = Tuple.to_list(shape)

        starts =
          Enum.zip_with([starts, lengths, dims], fn [s, l, d] ->
            s |> Kernel.max(0) |> Kernel.min(d - l)
          end)

        stops = Enum.zip_with(starts, lengths, &(&1 + &2))

        # An eager slice that would be a strided view (some columns of a
        # matrix: a fused weight split in three as Bumblebee loads GPT-2's)
        # gets a buffer of its own: a view keeps its whole source alive, and
        # every matrix product that reads it would copy it again. (In a
        # program a view is kept: no copy per call.)
        if strided_slice?(shape, lengths, strides) and not Op.recording?([r]) do
          defer(out, :contiguous, [op(:slice, [r], [starts, stops, strides])], [])
        else
          defer(out, :slice, [r], [starts, stops, strides])
        end
      else
        starts_ref = starts_ref(starts, device_of(tensor))
        block = op(:dynamic_slice, [r, starts_ref], [lengths])

        if Enum.all?(strides, &(&1 == 1)) do
          defer(out, :reshape, [block], [List.to_tuple(lengths)])
        else
          zeros = Enum.map(lengths, fn _ -> 0 end)
          defer(out, :slice, [block], [zeros, lengths, strides])
        end
      end
    end

    # Start indices (integers or scalar tensors) as one s64 tensor.
    defp starts_ref(starts, device) do
      refs =
        Enum.map(starts, fn
          i when is_integer(i) -> scalar_ref(i, {:s, 64}, device)
          %T{} = t -> ref_as(t, {:s, 64})
        end)

      op(:stack, refs, [0])
    end

    @impl true
    def put_slice(%T{type: type} = out, tensor, starts, slice) do
      device = device_of(tensor)
      inputs = [ref_as(tensor, type), starts_ref(starts, device), ref_as(slice, type)]
      defer(out, :put_slice, inputs, [])
    end

    @impl true
    def gather(out, tensor, indices, opts) do
      axes = Keyword.fetch!(opts, :axes)

      if quantized_rows?(tensor, axes == [0] and tuple_size(indices.shape) >= 2),
        do: dequantized_rows(out, tensor, :gather, ref(indices), [[0]]),
        else: defer(out, :gather, [ref(tensor), ref(indices)], [axes])
    end

    @impl true
    def concatenate(%T{type: type} = out, tensors, axis) do
      refs = Enum.map(tensors, &ref_as(&1, type))
      defer(out, :concatenate, refs, [axis])
    end

    @impl true
    def stack(%T{type: type} = out, tensors, axis) do
      refs = Enum.map(tensors, &ref_as(&1, type))
      defer(out, :stack, refs, [axis])
    end

    @impl true
    def select(%T{type: type} = out, pred, on_true, on_false) do
      defer(out, :select, [ref(pred), ref_as(on_true, type), ref_as(on_false, type)], [])
    end

    @impl true
    def clip(%T{type: type} = out, tensor, min, max) do
      defer(out, :clip, [ref_as(tensor, type), ref_as(min, type), ref_as(max, type)], [])
    end

    # -------------------------------------------------------------------------
    # Element-wise
    # -------------------------------------------------------------------------

    @arith [:add, :subtract, :multiply, :pow, :remainder, :divide, :atan2, :min, :max, :quotient] ++
             [:bitwise_and, :bitwise_or, :bitwise_xor, :left_shift, :right_shift]

    for op <- @arith do
      @impl true
      def unquote(op)(%T{type: type} = out, a, b) do
        defer(out, unquote(op), [ref_as(a, type), ref_as(b, type)], [])
      end
    end

    @compare [:equal, :not_equal, :greater, :less, :greater_equal, :less_equal]

    for op <- @compare do
      @impl true
      def unquote(op)(out, %T{type: ta} = a, %T{type: tb} = b) do
        type = Nx.Type.merge(ta, tb)
        defer(out, unquote(op), [ref_as(a, type), ref_as(b, type)], [])
      end
    end

    for op <- [:logical_and, :logical_or, :logical_xor] do
      @impl true
      def unquote(op)(out, a, b),
        do: defer(out, unquote(op), [ref(a), ref(b)], [])
    end

    @float_unary [:exp, :expm1, :log, :log1p, :sigmoid, :cos, :sin, :tan, :cosh, :sinh, :tanh] ++
                   [
                     :acos,
                     :asin,
                     :atan,
                     :acosh,
                     :asinh,
                     :atanh,
                     :sqrt,
                     :rsqrt,
                     :cbrt,
                     :erf,
                     :erfc
                   ] ++
                   [:erf_inv]

    for op <- @float_unary do
      @impl true
      def unquote(op)(%T{type: type} = out, tensor),
        do: defer(out, unquote(op), [ref_as(tensor, type)], [])
    end

    @impl true
    def abs(out, %T{type: {:c, _}} = tensor),
      do: defer(out, :abs, [ref(tensor)], [])

    def abs(%T{type: type} = out, tensor),
      do: defer(out, :abs, [ref_as(tensor, type)], [])

    for op <-
          [:bitwise_not, :ceil, :floor, :negate, :round, :sign, :conjugate] ++
            [:count_leading_zeros, :population_count] do
      @impl true
      def unquote(op)(%T{type: type} = out, tensor),
        do: defer(out, unquote(op), [ref_as(tensor, type)], [])
    end

    for op <- [:real, :imag, :is_nan, :is_infinity] do
      @impl true
      def unquote(op)(out, tensor),
        do: defer(out, unquote(op), [ref(tensor)], [])
    end

    # -------------------------------------------------------------------------
    # Reductions
    # -------------------------------------------------------------------------

    # (the op table names these ops as Nx does)
    for op <- [:all, :any, :sum, :product, :reduce_max, :reduce_min] do
      @impl true
      def unquote(op)(%T{type: type} = out, tensor, opts) do
        axes = opts[:axes]
        keep = opts[:keep_axes] || false
        # sum and product accumulate in the output type (Nx's rule)
        input = if unquote(op) in [:sum, :product], do: ref_as(tensor, type), else: ref(tensor)

        defer(out, unquote(op), [input], [axes, keep])
      end
    end

    for op <- [:argmax, :argmin] do
      @impl true
      def unquote(op)(out, %T{shape: shape} = tensor, opts) do
        axis = opts[:axis]
        keep = opts[:keep_axis] || false
        r = nan_first(unquote(op), ref(tensor), tensor, axis)

        case opts[:tie_break] || :low do
          :low ->
            defer(out, unquote(op), [r], [axis, keep])

          :high ->
            # The last of equal elements: search the reversed tensor (flattened
            # when there is no axis), map the index back, reshape to out.
            {searched, axis_arg, n} =
              if axis,
                do: {r, axis, elem(shape, axis)},
                else: {op(:reshape, [r], [{Nx.size(shape)}]), 0, Nx.size(shape)}

            reversed = op(:flip, [searched], [[axis_arg]])

            idx = op(unquote(op), [reversed], [axis_arg, keep and axis != nil])

            last = scalar_ref(n - 1, {:u, 32}, device_of(tensor))
            mapped = op(:subtract, [last, idx], [])
            defer(out, :reshape, [mapped], [out.shape])
        end
      end
    end

    # Nx: a NaN is both the largest and the smallest element. Where the
    # reduced range holds a NaN, every element becomes a flag (1 for NaN for
    # argmax, 0 for NaN for argmin), so the first NaN is found.
    defp nan_first(op, r, %T{type: type}, axis) do
      if Nx.Type.float?(type) do
        nan = op(:is_nan, [r], [])
        axes = if axis, do: [axis], else: nil
        any = op(:any, [nan], [axes, true])

        flag = if op == :argmax, do: nan, else: op(:logical_not, [nan], [])

        flagged = op(:as_type, [flag], [{:u, 8}])
        op(:select, [any, flagged, r], [])
      else
        r
      end
    end

    @impl true
    def reduce(out, tensor, acc, opts, fun),
      do: via_binary_backend(out, [tensor, acc], &Nx.BinaryBackend.reduce(out, &1, &2, opts, fun))

    @impl true
    def window_reduce(out, tensor, acc, window, opts, fun) do
      via_binary_backend(out, [tensor, acc], fn t, a ->
        Nx.BinaryBackend.window_reduce(out, t, a, window, opts, fun)
      end)
    end

    for op <- [:window_sum, :window_product, :window_max, :window_min] do
      @impl true
      def unquote(op)(%T{type: type} = out, tensor, window, opts) do
        rank = tuple_size(window)
        strides = opts[:strides] || List.duplicate(1, rank)
        padding = opts[:padding] || List.duplicate({0, 0}, rank)
        dilations = opts[:window_dilations] || List.duplicate(1, rank)
        window = Tuple.to_list(window)
        t = ref_as(tensor, type)

        defer(out, unquote(op), [t], [window, strides, padding, dilations])
      end
    end

    for {op, pick} <- [window_scatter_max: :argmax, window_scatter_min: :argmin] do
      @impl true
      def unquote(op)(out, tensor, source, init, window, opts),
        do: window_scatter(out, tensor, source, init, window, opts, unquote(pick))
    end

    # Nx's window_scatter_max/min (the gradient of window_max/min, as in max
    # pooling): the tensor is padded with `init`; each window's largest
    # (smallest) element — the last one where several are equal, as Nx
    # defines it — receives that window's `source` value, summed where
    # windows overlap, on top of `init`; selections in the padding are
    # dropped. Every window's elements are gathered by their flat indices in
    # the padded tensor: an index tensor {windows..., window elements}.
    defp window_scatter(%T{type: type, shape: shape} = out, t, source, init, window, opts, pick) do
      rank = tuple_size(shape)
      dims = Tuple.to_list(shape)
      window = Tuple.to_list(window)
      strides = opts[:strides] || List.duplicate(1, rank)
      padding = opts[:padding] || List.duplicate({0, 0}, rank)
      device = device_of(t)
      init = ref_as(init, type)

      padded_dims = Enum.zip_with(dims, padding, fn d, {lo, hi} -> d + lo + hi end)
      padded_size = Enum.product(padded_dims)

      windows =
        Enum.zip_with([padded_dims, window, strides], fn [d, k, s] -> div(d - k, s) + 1 end)

      elements = Enum.product(window)
      index_type = if padded_size <= 2_147_483_647, do: {:s, 32}, else: {:s, 64}

      padded = op(:pad, [ref_as(t, type), init], [Enum.map(padding, fn {l, h} -> {l, h, 0} end)])
      flat = op(:reshape, [padded], [{padded_size}])

      # index = Σ over axes of (window position · stride + offset) · axis weight
      grid = List.to_tuple(windows ++ window)

      weights =
        padded_dims
        |> Enum.reverse()
        |> Enum.scan(&(&1 * &2))
        |> Enum.reverse()
        |> tl()
        |> Kernel.++([1])

      index =
        [weights, strides, Enum.with_index(window)]
        |> Enum.zip_with(fn [w, s, {_k, axis}] ->
          position = op(:iota, [], [index_type, grid, axis, device])
          offset = op(:iota, [], [index_type, grid, rank + axis, device])
          position = op(:multiply, [position, scalar_ref(s * w, index_type, device)], [])
          offset = op(:multiply, [offset, scalar_ref(w, index_type, device)], [])
          op(:add, [position, offset], [])
        end)
        |> Enum.reduce(&op(:add, [&2, &1], []))

      count = Enum.product(windows)
      index = op(:reshape, [index], [{count, elements}])
      values = op(:take, [flat, index], [0])
      # the last extreme: the first one of the reversed window
      chosen = op(pick, [op(:flip, [values], [[1]])], [1, true])
      chosen = op(:subtract, [scalar_ref(elements - 1, {:u, 32}, device), chosen], [])
      chosen = op(:as_type, [chosen], [index_type])
      target = op(:take_along_axis, [index, chosen], [1])

      source = op(:reshape, [ref_as(source, type)], [{count}])
      zeros = scalar_ref(0, type, device)
      zeros = op(:broadcast_to, [zeros], [{padded_size}])
      summed = op(:scatter, [zeros, target, source], [[0], true])
      summed = op(:reshape, [summed], [List.to_tuple(padded_dims)])

      starts = Enum.map(padding, &elem(&1, 0))
      stops = Enum.zip_with(starts, dims, &(&1 + &2))
      kept = op(:slice, [summed], [starts, stops, List.duplicate(1, rank)])
      defer(out, :add, [kept, init], [])
    end

    # -------------------------------------------------------------------------
    # Sorting and indexing
    # -------------------------------------------------------------------------

    @impl true
    def sort(out, tensor, opts) do
      axis = Keyword.fetch!(opts, :axis)
      defer(out, :sort, [tensor], [axis, Keyword.get(opts, :direction, :asc)])
    end

    @impl true
    def argsort(out, tensor, opts) do
      axis = Keyword.fetch!(opts, :axis)
      defer(out, :argsort, [tensor], [axis, Keyword.get(opts, :direction, :asc)])
    end

    @impl true
    def indexed_add(out, tensor, indices, updates, opts),
      do: scatter(out, tensor, indices, updates, opts, true)

    @impl true
    def indexed_put(out, tensor, indices, updates, opts),
      do: scatter(out, tensor, indices, updates, opts, false)

    defp scatter(%T{type: type} = out, tensor, indices, updates, opts, add?) do
      axes = Keyword.fetch!(opts, :axes)
      inputs = [ref_as(tensor, type), ref(indices), ref_as(updates, type)]
      # (MLX 0.32's CUDA scatter has no kernels for 64-bit integers and
      # complex64: the worker writes them as u32 pairs, and adds them on its
      # CPU stream; ops/indexing.rs)
      defer(out, :scatter, inputs, [axes, add?])
    end

    # -------------------------------------------------------------------------
    # Linear algebra, convolution, FFT (ExMLX.Backend.LinAlg); Nx.block/4
    # (ExMLX.Backend.Blocks)
    # -------------------------------------------------------------------------

    @impl true
    defdelegate dot(out, a, contract_a, batch_a, b, contract_b, batch_b),
      to: ExMLX.Backend.LinAlg

    @impl true
    defdelegate conv(out, input, kernel, opts), to: ExMLX.Backend.LinAlg

    @impl true
    defdelegate triangular_solve(out, a, b, opts), to: ExMLX.Backend.LinAlg

    @impl true
    defdelegate fft(out, tensor, opts), to: ExMLX.Backend.LinAlg

    @impl true
    defdelegate ifft(out, tensor, opts), to: ExMLX.Backend.LinAlg

    @impl true
    defdelegate block(struct, output, args, fun), to: ExMLX.Backend.Blocks
  end
end
