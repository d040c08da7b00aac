if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Quantization.Quantize do
    @moduledoc false
    # The `Nx.block/4` of ExMLX.Quantization.quantize/2 inside `defn`.
    defstruct [:bits, :group_size, :transpose]
  end

  defmodule ExMLX.Quantization do
    @moduledoc """
    Quantized Nx tensors on `ExMLX.Backend`: a matrix stored as MLX's affine
    quantization (`ExMLX.quantize/2`: each group of `:group_size` values of a
    row kept as `:bits`-bit integers with a scale and a bias), keeping its
    logical shape and type.

        iex> w = Nx.iota({4, 64}, axis: 1, type: :f32, backend: ExMLX.Backend)
        iex> wq = ExMLX.Quantization.quantize(w, bits: 6, group_size: 64)
        iex> {wq.shape, wq.type, ExMLX.Quantization.quantized?(wq)}
        {{4, 64}, {:f, 32}, true}
        iex> x = Nx.broadcast(Nx.tensor(1.0, backend: ExMLX.Backend), {1, 4})
        iex> Nx.dot(x, wq) |> Nx.sum() |> Nx.to_number()
        8064.0

    What the backend does with a quantized tensor:

      * `Nx.dot/6` with a quantized matrix as its right operand, contracted
        over one of its axes with no batch axes (a dense layer's kernel, as
        Axon and Bumblebee apply it), runs MLX's `quantized_matmul` on the
        packed values: the matrix is never dequantized; so does a quantized
        left operand with a right one of rank 2 or more (the operands
        swapped, the result's axes put back in Nx's order);
      * `Nx.take/3` and `Nx.gather/3` of whole rows of a quantized matrix
        stored as it is (an embedding's table, grouped along its rows) gather
        the rows' packed values, scales and biases and dequantize only those;
      * `Nx.transpose/2` of a quantized matrix, and `Nx.reshape/2` and
        `Nx.slice/4` that keep its last (grouped) axis whole, rearrange the
        stored values without dequantizing them (as Bumblebee's loading of
        a checkpoint's layers does);
      * every other op (a product with a vector, or over batch axes, included)
        reads the dequantized matrix (`dequantize/1`): a new tensor of the
        logical type, made at each use, counted by `ExMLX.Memory` like any
        other;
      * `ExMLX.Compiler` programs take quantized arguments as they are
        (their packed values, scales and biases are inputs of the program,
        and the format is part of its cache key): a dense layer's product in
        a program, a decoding loop's included, is `quantized_matmul`; other
        uses dequantize inside the program;
      * `quantize/2` inside `defn` (an `Nx.block/4`) makes a quantized value
        of the program, which its later `Nx.dot` multiplies by as packed
        values, with `ExMLX.Compiler` and with `Nx.Defn.Evaluator` on
        `ExMLX.Backend`; on another backend it gives the values MLX's
        quantization stands for (quantized and dequantized by MLX at run
        time, `Nx.runtime_call/4`).

    `Nx.byte_size/1` gives the logical size (Nx computes it from the shape
    and type); `stored_bytes/1` gives what the packed values, scales and
    biases hold.
    """

    @enforce_keys [:packed, :scales, :biases, :bits, :group_size, :transposed]
    defstruct @enforce_keys

    @typedoc """
    The packed values, scales and biases (`ExMLX.Tensor`s) of a matrix
    quantized along its last axis, and whether the logical tensor is that
    matrix transposed (a `{in, out}` kernel stored as its `{out, in}`
    transpose, grouped along `in`, as checkpoints store linear layers).
    """
    @type t :: %__MODULE__{
            packed: ExMLX.Tensor.t(),
            scales: ExMLX.Tensor.t(),
            biases: ExMLX.Tensor.t(),
            bits: pos_integer(),
            group_size: pos_integer(),
            transposed: boolean()
          }

    alias Nx.Tensor, as: T

    # MLX's affine formats (checked by ExMLX.quantize/2 in the op table;
    # here where no MLX op runs: a traced quantize, a checkpoint's config)
    @bits [2, 3, 4, 5, 6, 8]
    @group_sizes [32, 64, 128]

    @doc """
    Quantizes the matrix `tensor` (`{:f, 32}`, `{:f, 16}` or `{:bf, 16}`,
    rank 2) into a quantized tensor of the same shape and type.

    Options:

      * `:bits` - 2, 3, 4, 5, 6 or 8 (default 4);
      * `:group_size` - 32, 64 or 128 values share a scale and a bias
        (default 64);
      * `:transpose` - `true` to group along the first axis instead of the
        last (the contracted axis of a `{in, out}` kernel in `Nx.dot(x, w)`):
        the transpose is what is stored (default `false`);
      * `:mode` - `:affine`, MLX's scale-and-bias quantization (the only
        one ExMLX keeps: MLX 0.32's `:mxfp4` is refused with an error).

    Errors name what MLX refuses (`ExMLX.quantize/2`).

        iex> w = Nx.iota({2, 32}, type: :f32, backend: ExMLX.Backend)
        iex> ExMLX.Quantization.quantize(w, bits: 5, group_size: 32) |> ExMLX.Quantization.dequantize() |> Nx.to_flat_list() |> Enum.take(4)
        [0.0, 1.0, 2.0, 3.0]
    """
    @spec quantize(Nx.Tensor.t(), keyword()) :: Nx.Tensor.t()
    def quantize(%T{} = tensor, opts \\ []) do
      opts = Keyword.validate!(opts, bits: 4, group_size: 64, transpose: false, mode: :affine)
      check_mode!(opts[:mode])

      if quantized?(tensor),
        do: raise(ArgumentError, "tensor: already quantized (#{describe(tensor)})")

      if tuple_size(tensor.shape) != 2,
        do:
          raise(
            ArgumentError,
            "tensor: quantize takes a matrix (rank 2), got shape #{inspect(tensor.shape)}"
          )

      transpose = opts[:transpose]

      unless is_boolean(transpose),
        do: raise(ArgumentError, ":transpose must be a boolean, got: #{inspect(transpose)}")

      case tensor.data do
        %Nx.Defn.Expr{} -> traced_quantize(tensor, opts)
        _ -> quantize_tensor(tensor, opts)
      end
    end

    defp quantize_tensor(tensor, opts) do
      transpose = opts[:transpose]
      matrix = ExMLX.Backend.from_nx(tensor)
      matrix = if transpose, do: ExMLX.transpose(matrix, [1, 0]), else: matrix

      {packed, scales, biases} =
        ExMLX.quantize(matrix, bits: opts[:bits], group_size: opts[:group_size])

      quantization = %__MODULE__{
        packed: packed,
        scales: scales,
        biases: biases,
        bits: opts[:bits],
        group_size: opts[:group_size],
        transposed: transpose
      }

      %{
        tensor
        | data: %ExMLX.Backend{ref: nil, device: packed.device, quantization: quantization}
      }
    end

    defp check_mode!(:affine), do: :ok

    defp check_mode!(mode),
      do:
        raise(
          ArgumentError,
          ":mode must be :affine (MLX's scale-and-bias quantization; ExMLX does not " <>
            "keep other modes), got: #{inspect(mode)}"
        )

    # Inside `defn` (an expression): an `Nx.block/4` that ExMLX.Backend
    # runs as `quantize/2`, so a later `Nx.dot` of the same program or
    # Evaluator run multiplies by the packed values. Another backend runs
    # the block's default: the values MLX's quantization gives, dequantized
    # (round_trip/2, at run time).
    defp traced_quantize(tensor, opts) do
      {bits, group_size} = {opts[:bits], opts[:group_size]}

      # (the errors ExMLX.quantize/2 gives, raised while tracing)
      unless bits in @bits,
        do:
          raise(ExMLX.Error,
            kind: :argument,
            message: "bits: quantization takes bits of #{inspect(@bits)}, got #{inspect(bits)}"
          )

      unless group_size in @group_sizes,
        do:
          raise(ExMLX.Error,
            kind: :argument,
            message:
              "group_size: quantization takes group sizes of #{inspect(@group_sizes)}, " <>
                "got #{inspect(group_size)}"
          )

      unless tensor.type in [{:f, 32}, {:f, 16}, {:bf, 16}],
        do:
          raise(ExMLX.Error,
            kind: :type,
            message:
              "tensor: quantize needs {:f, 32}, {:f, 16} or {:bf, 16}, " <>
                "got #{inspect(tensor.type)}"
          )

      block = %ExMLX.Quantization.Quantize{
        bits: bits,
        group_size: group_size,
        transpose: opts[:transpose]
      }

      template = Nx.template(tensor.shape, tensor.type, names: tensor.names)
      Nx.block(block, [tensor], template, &round_trip_at_run_time/2)
    end

    defp round_trip_at_run_time(%ExMLX.Quantization.Quantize{} = block, tensor) do
      template = Nx.template(tensor.shape, tensor.type, names: tensor.names)
      opts = [bits: block.bits, group_size: block.group_size, transpose: block.transpose]
      Nx.runtime_call(template, tensor, opts, &__MODULE__.round_trip/2)
    end

    @doc false
    # `tensor` (on any backend) quantized by MLX then dequantized, back on
    # its backend: the values a quantized tensor stands for.
    def round_trip(%T{data: %backend{}} = tensor, opts) do
      tensor
      |> Nx.backend_copy(ExMLX.Backend)
      |> quantize(opts)
      |> dequantize()
      |> Nx.backend_transfer(backend)
    end

    @doc """
    Quantizes the dense kernels of a parameters container: an
    `Axon.ModelState` (its `data`) or a map of layer names to maps of
    parameter names to tensors (Axon's and Bumblebee's parameters).

    A parameter is quantized when it is named `"kernel"`, is a matrix, and
    `:only` accepts it, each grouped along the axis its layer contracts: a
    dense layer's kernel (`{in, out}`) is stored transposed (`quantize/2`'s
    `:transpose`), so that its products run MLX's `quantized_matmul`; a
    transposed dense layer's kernel (`{out, in}`: Bumblebee's
    `dense_transposed`, which output layers use) and an embedding's table
    (`{vocabulary, hidden}`) are stored as they are, so that lookups
    dequantize only the rows they take. The layers' kinds come from the
    Axon model given as `:model` (`quantize_model/2` passes it); without
    it, a layer whose name ends with `"embedding"` is an embedding
    (`:embedding?`) and every other is a dense layer.

    The quantized tensors are computed before it returns, so that an
    unquantized kernel is freed as soon as nothing else holds it
    (`ExMLX.Memory` then counts the quantized storage alone; `quantize/2`
    of one tensor stays lazy, as other ops are).

    Options: `:bits`, `:group_size` and `:mode` as in `quantize/2`; `:only` - a
    function of the layer name and the parameter name that returns whether
    to quantize it (default: every qualifying kernel); `:model` - the Axon
    model the parameters belong to; `:embedding?` - without `:model`, a
    function of the layer name that tells an embedding (default: the name
    ends with `"embedding"`, as Bumblebee's `token_embedding` layers).

        iex> params = %{
        ...>   "dense" => %{"kernel" => Nx.iota({64, 8}, type: :f32, backend: ExMLX.Backend), "bias" => Nx.iota({8}, type: :f32, backend: ExMLX.Backend)},
        ...>   "small" => %{"kernel" => Nx.iota({3, 8}, type: :f32, backend: ExMLX.Backend)}
        ...> }
        iex> quantized = ExMLX.Quantization.quantize_params(params, bits: 8, group_size: 64)
        iex> for {layer, p} <- Enum.sort(quantized), {name, t} <- Enum.sort(p), do: {layer, name, ExMLX.Quantization.quantized?(t)}
        [{"dense", "bias", false}, {"dense", "kernel", true}, {"small", "kernel", false}]
    """
    @spec quantize_params(map(), keyword()) :: map()
    def quantize_params(params, opts \\ [])

    def quantize_params(%{__struct__: Axon.ModelState, data: data} = state, opts),
      do: %{state | data: quantize_params(data, opts)}

    def quantize_params(%{} = params, opts) when not is_struct(params) do
      opts =
        Keyword.validate!(opts,
          bits: 4,
          group_size: 64,
          mode: :affine,
          only: fn _layer, _name -> true end,
          embedding?: &String.ends_with?(&1, "embedding"),
          model: nil
        )

      {only, embedding?} = {opts[:only], opts[:embedding?]}
      kinds = layer_kinds(opts[:model])

      unless is_function(only, 2),
        do: raise(ArgumentError, ":only must be a function of 2 arguments, got: #{inspect(only)}")

      unless is_function(embedding?, 1),
        do:
          raise(
            ArgumentError,
            ":embedding? must be a function of 1 argument, got: #{inspect(embedding?)}"
          )

      check_mode!(opts[:mode])
      format = [bits: opts[:bits], group_size: opts[:group_size]]

      # (one tensor held by several parameters, ExMLX.Params.share_equal/2's
      # tied weights, is quantized once and stays shared)
      {quantized, once} =
        Enum.map_reduce(params, %{}, fn
          {layer, %{} = layer_params}, once when not is_struct(layer_params) ->
            # (grouped along `in`: a dense kernel's first axis, a transposed
            # dense kernel's or an embedding's last)
            transpose =
              case kinds do
                nil -> not embedding?.(to_string(layer))
                %{^layer => :dense} -> true
                %{^layer => kind} when kind in [:dense_transposed, :embedding] -> false
                _other -> nil
              end

            {layer_params, once} =
              Enum.map_reduce(layer_params, once, fn {name, value}, once ->
                if transpose != nil and kernel?(name, value, opts[:group_size], transpose) and
                     only.(layer, name) do
                  {done, once} = quantize_once(value, [transpose: transpose] ++ format, once)
                  {{name, done}, once}
                else
                  {{name, value}, once}
                end
              end)

            {{layer, Map.new(layer_params)}, once}

          other, once ->
            {other, once}
        end)

      # (computed before returning: a lazy quantized tensor holds the
      # tensor it quantizes, which then stays in memory until its first
      # use, whoever else holds it)
      once |> Map.values() |> List.to_tuple() |> ExMLX.Params.eval()

      Map.new(quantized)
    end

    # `quantize(value, opts)`, or what an earlier call with the same tensor
    # and options gave (`once`): a tensor held by several parameters stays
    # one tensor
    defp quantize_once(value, opts, once) do
      case once do
        %{{^value, ^opts} => done} ->
          {done, once}

        _ ->
          done = quantize(value, opts)
          {done, Map.put(once, {value, opts}, done)}
      end
    end

    # layer name => Axon op name, for a model's layers
    defp layer_kinds(nil), do: nil

    defp layer_kinds(%{__struct__: Axon} = model),
      # (Axon is the caller's dependency, not ExMLX's)
      do: apply(Axon, :properties, [model])

    defp layer_kinds(other),
      do: raise(ArgumentError, ":model must be an Axon model, got: #{inspect(other)}")

    @doc """
    `model_info` (Bumblebee's `%{model: axon, params: params, ...}`, from
    `Bumblebee.load_model/2`) with its parameters quantized by
    `quantize_params/2`, the layers' kinds read from its model. Options as
    for `quantize_params/2`.
    """
    @spec quantize_model(map(), keyword()) :: map()
    def quantize_model(%{model: model, params: params} = model_info, opts \\ []),
      do: %{model_info | params: quantize_params(params, Keyword.put(opts, :model, model))}

    @doc """
    Loads a quantized model folder in mlx-community's layout (made by
    mlx-lm's `convert -q`, or downloaded from the Hub's mlx-community) into
    a Bumblebee model whose quantized layers stay quantized: returns
    `{:ok, %{model: model, params: params, spec: spec}}` as
    `Bumblebee.load_model/2` does.

    The folder holds config.json with a `"quantization"` entry (`"bits"`,
    `"group_size"`, `"mode": "affine"`; an entry named by a layer's path
    gives that layer's own format, `false` leaves it plain) and safetensors
    files (`model.safetensors` or those `model.safetensors.index.json`
    names) in which a quantized layer `P` is `P.weight` (packed `uint32`),
    `P.scales` and `P.biases`. Each becomes one quantized tensor of the
    layer's logical shape, never dequantized: a dense layer's kernel runs
    `quantized_matmul`, an embedding's lookups dequantize only the rows they
    take. Bumblebee's own mapping of checkpoint names to layers is used (the
    architectures Bumblebee 0.7 loads: Llama, Mistral, Qwen3, Phi-3, ...),
    so the model is Bumblebee's, unchanged.

    Every tensor's header is checked before any tensor is read: a packed
    weight without its scales or biases, scales whose shape does not match
    the format (a wrong group size), bits that do not divide the packed
    words, raise an `ArgumentError` naming the tensor, and nothing is loaded.
    A quantized layer the model has no parameter for raises too. The
    parameters are computed before it returns (`ExMLX.Params.eval/1`): a
    converted one does not keep what it was converted from.

    Needs Bumblebee (0.7) in the caller's dependencies. `repository` is
    `{:local, folder}`. Options:

      * `:type` - the model's parameter type; by default the quantized
        layers' scales' type (mlx-community's folders are mostly bf16). A
        type other than the scales' converts the scales and biases to it
        (the packed values are kept), and Bumblebee converts the plain
        parameters;
      * `:device` - where the tensors are read to (default
        `ExMLX.default_device/0`);
      * `:module`, `:architecture`, `:spec_overrides`, `:log_params_diff` -
        as for `Bumblebee.load_model/2`.

    For example, with a folder made by
    `mlx_lm.convert --hf-path MODEL -q --q-bits 4 --mlx-path DIR`:

        {:ok, model_info} = ExMLX.Quantization.load_model({:local, "DIR"})
        {:ok, tokenizer} = Bumblebee.load_tokenizer({:local, "DIR"})
    """
    @spec load_model({:local, Path.t()}, keyword()) :: {:ok, map()}
    def load_model(repository, opts \\ []),
      do: ExMLX.Quantization.Checkpoint.load_model(repository, opts)

    # a floating matrix named "kernel" whose grouped axis (`in`, or an
    # embedding's last) is a multiple of the group size
    defp kernel?("kernel", %T{shape: {rows, columns}, type: {kind, _}} = t, group_size, transpose) do
      grouped = if transpose, do: rows, else: columns
      kind in [:f, :bf] and rem(grouped, group_size) == 0 and not quantized?(t)
    end

    defp kernel?(_name, _value, _group_size, _transpose), do: false

    @doc """
    The dequantized values of a quantized tensor, as a plain tensor on
    `ExMLX.Backend` of its shape and type (a plain tensor is returned as
    it is).

        iex> w = Nx.tensor([[0.0, 1.0, 2.0, 3.0]], backend: ExMLX.Backend) |> Nx.tile([1, 8])
        iex> wq = ExMLX.Quantization.quantize(w, bits: 2, group_size: 32)
        iex> ExMLX.Quantization.dequantize(wq) |> Nx.slice([0, 0], [1, 4]) |> Nx.to_flat_list()
        [0.0, 1.0, 2.0, 3.0]
    """
    @spec dequantize(Nx.Tensor.t()) :: Nx.Tensor.t()
    def dequantize(%T{data: %ExMLX.Backend{quantization: %__MODULE__{} = q, device: device}} = t) do
      ref = dequantized(q).ref
      %{t | data: %ExMLX.Backend{ref: ref, device: device}}
    end

    def dequantize(%T{} = t), do: t

    @doc false
    # The dequantized matrix of `q` as an `ExMLX.Tensor` (the logical
    # tensor's values in the scales' type).
    def dequantized(%__MODULE__{} = q) do
      matrix =
        ExMLX.dequantize(q.packed, q.scales, q.biases, bits: q.bits, group_size: q.group_size)

      if q.transposed, do: ExMLX.transpose(matrix, [1, 0]), else: matrix
    end

    @doc """
    Whether `tensor` is quantized.

        iex> ExMLX.Quantization.quantized?(Nx.tensor([1.0], backend: ExMLX.Backend))
        false
    """
    @spec quantized?(Nx.Tensor.t()) :: boolean()
    def quantized?(%T{data: %ExMLX.Backend{quantization: %__MODULE__{}}}), do: true
    def quantized?(%T{}), do: false

    @doc """
    The bytes a quantized tensor's packed values, scales and biases hold (a
    plain tensor's: `Nx.byte_size/1`).

        iex> w = Nx.iota({8, 64}, type: :f32, backend: ExMLX.Backend)
        iex> ExMLX.Quantization.quantize(w, bits: 4, group_size: 64) |> ExMLX.Quantization.stored_bytes()
        320
    """
    @spec stored_bytes(Nx.Tensor.t()) :: non_neg_integer()
    def stored_bytes(%T{data: %ExMLX.Backend{quantization: %__MODULE__{} = q}}),
      do: Enum.sum(for t <- [q.packed, q.scales, q.biases], do: bytes(t))

    def stored_bytes(%T{} = t), do: Nx.byte_size(t)

    defp bytes(%ExMLX.Tensor{shape: shape, type: {_, bits}}),
      do: div(Enum.reduce(Tuple.to_list(shape), 1, &(&1 * &2)) * bits, 8)

    @doc false
    # MLX's affine quantization's bits and group sizes.
    def formats, do: %{bits: @bits, group_sizes: @group_sizes}

    @doc false
    # `q` (not transposed, `columns` values a row) with its rows rearranged
    # by `fun.(stored, last)`, applied to its packed values, scales and
    # biases alike; `last` is the stored tensor's last dimension, from the
    # format (a program's recorded tensors have no shape).
    def map_stored(%__MODULE__{transposed: false} = q, columns, fun) do
      %{
        q
        | packed: fun.(q.packed, div(columns * q.bits, 32)),
          scales: fun.(q.scales, div(columns, q.group_size)),
          biases: fun.(q.biases, div(columns, q.group_size))
      }
    end

    @doc false
    # The stored tensors' references, in the order `quantized_matmul`,
    # `dequantize` and programs take them.
    def stored_refs(%__MODULE__{} = q), do: [q.packed.ref, q.scales.ref, q.biases.ref]

    @doc false
    # `q` with its stored tensors' references replaced (in stored_refs/1's
    # order), on `device`.
    def with_stored_refs(%__MODULE__{} = q, [packed, scales, biases], device) do
      %{
        q
        | packed: %{q.packed | ref: packed, device: device},
          scales: %{q.scales | ref: scales, device: device},
          biases: %{q.biases | ref: biases, device: device}
      }
    end

    @doc false
    # `quantize/2` as a block run by a backend (`Nx.block/4`): inside a
    # program, `ExMLX.Backend` makes a quantized tensor of it.
    def quantize_block(%ExMLX.Quantization.Quantize{} = block, tensor),
      do:
        quantize_tensor(tensor,
          bits: block.bits,
          group_size: block.group_size,
          transpose: block.transpose
        )

    @doc false
    # "4-bit, groups of 64" and the layout, for messages and inspection.
    def describe(%T{data: %ExMLX.Backend{quantization: %__MODULE__{} = q}}) do
      layout = if q.transposed, do: ", stored transposed", else: ""
      "quantized #{q.bits}-bit, groups of #{q.group_size}#{layout}"
    end
  end
end
