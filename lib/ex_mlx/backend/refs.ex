if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.Refs do
    @moduledoc false
    # What the parts of ExMLX.Backend share: a tensor's native reference,
    # results wrapped as Nx tensors, ops queued through ExMLX.Op, Nx numbers
    # and types as MLX takes them. ExMLX.Backend, ExMLX.Backend.LinAlg and
    # ExMLX.Backend.Blocks import it.

    alias Nx.Tensor, as: T
    alias ExMLX.Op

    # ExMLX.Backend's struct and ExMLX.Quantization's are written here as
    # the maps they are (`%{__struct__: ExMLX.Backend, ...}`): ExMLX.Backend
    # imports this module, so this module cannot wait for those structs
    # while it compiles (a deadlock between the two files).

    # ExMLX.Backend's data for `ref` on `device`, quantized as `quantization`
    # (nil for a plain tensor): every field of the struct.
    defp backend(ref, device, quantization),
      do: %{__struct__: ExMLX.Backend, ref: ref, device: device, quantization: quantization}

    # The MLX type an Nx type is stored as.
    def storage_type({:u, bits}) when bits in [2, 4], do: {:u, 8}
    def storage_type({:s, bits}) when bits in [2, 4], do: {:s, 8}
    def storage_type({:f, 8}), do: {:f, 16}
    def storage_type({:f8_e4m3fn, 8}), do: {:f, 16}

    def storage_type({:c, 128}),
      do: raise(ArgumentError, "ExMLX.Backend does not support {:c, 128}: MLX has complex64 only")

    def storage_type(type), do: type

    def widened?(type), do: storage_type(type) != type

    def device_of(%T{data: %{__struct__: ExMLX.Backend, device: device}}), do: device
    def device_of(_), do: default_device()

    def default_device, do: ExMLX.default_device()

    def opts_device(opts), do: Keyword.get(opts, :device, default_device())

    # The native reference of a tensor, transferring it here if it lives on
    # another backend.
    # A quantized tensor reads as its dequantized values (ExMLX.Quantization).
    def ref(%T{
          data: %{__struct__: ExMLX.Backend, quantization: %{__struct__: ExMLX.Quantization} = q}
        }),
        do: ExMLX.Quantization.dequantized(q).ref

    def ref(%T{data: %{__struct__: ExMLX.Backend, ref: ref}}), do: ref

    def ref(%T{} = t),
      do: t |> Nx.backend_transfer({ExMLX.Backend, device: default_device()}) |> ref()

    # Wraps a native result as `out`, casting it if MLX produced another type
    # (comparisons give :bool where Nx wants u8, for instance).
    def wrap(ref, out) when is_reference(ref) do
      {shape, type, device} = Op.info(ref)
      wrap({ref, shape, type, device}, out)
    end

    def wrap({ref, _shape, type, device}, %T{type: out_type} = out) do
      storage = storage_type(out_type)
      ref = if type == storage, do: ref, else: op(:as_type, [ref], [storage], storage)
      %{out | data: backend(ref, device, nil)}
    end

    # Every op goes through ExMLX.Op (native/ex_mlx/core/src/ops/table.rs
    # lists them); inputs are Nx tensors or native references.

    # `out` holding the quantized values `q` (ExMLX.Quantization).
    def quantized(out, %{__struct__: ExMLX.Quantization} = q),
      do: %{out | data: backend(nil, q.packed.device, q)}

    # Op `name` for the result `out`, queued without waiting (ExMLX.Op.defer/4):
    # Nx already knows the result's shape and type, so only reads wait.
    def defer(%T{type: type} = out, name, inputs, params) do
      {ref, device} = Op.defer(name, refs(inputs), params, storage_type(type))
      %{out | data: backend(ref, device, nil)}
    end

    # An intermediate result's reference: op `name` queued without waiting,
    # cast to `type` (MLX's own type with :any).
    def op(name, inputs, params, type \\ :any) do
      {ref, _device} = Op.defer(name, refs(inputs), params, type)
      ref
    end

    # Op `name` waited for, so its errors are raised here: the list of its
    # results' references.
    def run_op(name, inputs, params) do
      case Op.run(name, refs(inputs), params) do
        many when is_list(many) -> Enum.map(many, fn {ref, _, _, _} -> ref end)
        {ref, _, _, _} -> [ref]
      end
    end

    defp refs(inputs),
      do:
        Enum.map(inputs, fn
          %T{} = t -> ref(t)
          ref -> ref
        end)

    # The tensor's native reference, converted to MLX type `type` if needed.
    def ref_as(%T{type: type} = t, type), do: ref(t)

    def ref_as(%T{} = t, type) do
      r = ref(t)
      storage = storage_type(type)

      # deferred: a cast costs no round trip to the worker
      if storage_type(t.type) == storage,
        do: r,
        else: op(:as_type, [r], [storage], storage)
    end

    def scalar_ref(value, type, device) do
      storage = storage_type(type)

      op(:full, [], [scalar_value(value, type), storage, {}, device], storage)
    end

    # Nx numbers as the NIF takes them; integers wrap to the type's width as
    # Nx.BinaryBackend does.
    def scalar_value(%Complex{re: re, im: im}, _type), do: {re, im}
    def scalar_value(value, {:c, _}) when is_number(value), do: {value, 0.0}

    def scalar_value(value, {kind, bits}) when is_integer(value) and kind in [:s, :u] do
      <<wrapped::size(bits)>> = <<value::size(bits)>>

      case kind do
        :u ->
          wrapped

        :s ->
          <<signed::signed-size(bits)>> = <<wrapped::size(bits)>>
          signed
      end
    end

    def scalar_value(value, {kind, _}) when is_float(value) and kind in [:s, :u],
      do: trunc(value)

    def scalar_value(value, _type), do: value

    # Rows of a quantized matrix stored as it is (grouped along its rows:
    # an embedding's table) are gathered from its packed values, scales and
    # biases, then dequantized, as mlx-lm's quantized embedding does: the
    # table is never dequantized whole.
    def quantized_rows?(
          %T{
            shape: {_, _},
            data: %{
              __struct__: ExMLX.Backend,
              quantization: %{__struct__: ExMLX.Quantization, transposed: false}
            }
          },
          rows?
        ),
        do: rows?

    def quantized_rows?(_tensor, _rows?), do: false

    def dequantized_rows(
          out,
          %T{data: %{__struct__: ExMLX.Backend, quantization: q}},
          name,
          index,
          params
        ) do
      rows = for ref <- ExMLX.Quantization.stored_refs(q), do: op(name, [ref, index], params)
      defer(out, :dequantize, rows, [q.group_size, q.bits])
    end

    # Runs `fun` on Nx.BinaryBackend copies of `tensors` and brings the result back.
    def via_binary_backend(out, [first | _] = tensors, fun) do
      device = device_of(first)
      copies = Enum.map(tensors, &Nx.backend_copy(&1, Nx.BinaryBackend))
      # The reducer builds tensors too: keep them on Nx.BinaryBackend.
      result = Nx.with_default_backend(Nx.BinaryBackend, fn -> apply(fun, copies) end)
      ExMLX.Backend.from_binary(out, Nx.to_binary(result), device: device)
    end

    # `ref` with its axes in the order `axes`: itself when that is their order
    def transposed(ref, axes) do
      if axes == Enum.to_list(0..(length(axes) - 1)//1),
        do: ref,
        else: op(:transpose, [ref], [axes])
    end
  end
end
