if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Compiler.QuantizedInputs do
    @moduledoc false
    # Quantized arguments of ExMLX.Compiler programs (ExMLX.Quantization,
    # docs/decisions/0012-quantized-tensors.md). A quantized parameter is
    # three inputs of the program (its packed values, scales and biases);
    # while recording, the graph sees it as a quantized tensor whose three
    # tensors are those inputs, so that ExMLX.Backend records `Nx.dot` with
    # it as `quantized_matmul` and any other use as `dequantize`. Which
    # arguments are quantized, and how, is part of the program's cache key.

    alias ExMLX.Quantization

    @doc """
    For a call of `compiled` (a program made without quantized inputs, or
    `{:evaluator, reason}`) on `args` (zero-arity functions): the arguments,
    those the program reads called once (the others stay unread, as Nx's
    lazy arguments ask), and the quantization of each quantized one it
    reads: `{args, signature}`, the signature a list of
    `{index, {bits, group_size, transposed}}` (`[]` when none is quantized).
    """
    def signature({:program, %{reads: reads}}, args) do
      indexed = List.to_tuple(args)
      called = for i <- reads, do: {i, elem(indexed, i).()}

      signature =
        for {i, %Nx.Tensor{data: %ExMLX.Backend{quantization: %Quantization{} = q}}} <- called,
            do: {i, {q.bits, q.group_size, q.transposed}}

      {with_called(args, 0, called, []), signature}
    end

    def signature(_evaluator, args), do: {args, []}

    # `args` with the ones in `called` ({index, value}, by index) giving
    # their value
    defp with_called([_ | args], i, [{i, t} | called], acc),
      do: with_called(args, i + 1, called, [fn -> t end | acc])

    defp with_called([arg | args], i, called, acc),
      do: with_called(args, i + 1, called, [arg | acc])

    defp with_called([], _i, _called, acc), do: Enum.reverse(acc)

    @doc """
    The parameters a program with inputs `used` from `sources` (a tuple,
    in the order of `sources/2`) reads: their indices, each once, in order.
    """
    def reads(used, sources) do
      used |> Enum.map(&elem(elem(sources, &1), 0)) |> Enum.uniq() |> Enum.sort()
    end

    @doc """
    The program's inputs for `count` parameters: for each input, in order,
    `{parameter index, component}`, the component `:plain` or one of
    `:packed`, `:scales`, `:biases` for a quantized parameter.
    """
    def sources(count, signature) do
      formats = Map.new(signature)

      Enum.flat_map(0..(count - 1)//1, fn i ->
        if Map.has_key?(formats, i),
          do: [{i, :packed}, {i, :scales}, {i, :biases}],
          else: [{i, :plain}]
      end)
    end

    @doc """
    The parameters' values while recording: `parameters` (templates), the
    inputs' symbolic references in the order of `sources/2`.
    """
    def parameters(parameters, signature, refs, device) do
      formats = Map.new(signature)
      refs = List.to_tuple(refs)

      {values, _} =
        parameters
        |> Enum.with_index()
        |> Enum.map_reduce(0, fn {t, i}, next ->
          case formats do
            %{^i => format} ->
              inputs = for k <- 0..2, do: elem(refs, next + k)
              {fn -> quantized(t, format, inputs, device) end, next + 3}

            _ ->
              ref = elem(refs, next)
              {fn -> %{t | data: %ExMLX.Backend{ref: ref, device: device}} end, next + 1}
          end
        end)

      values
    end

    # a quantized tensor of `t`'s shape and type whose stored tensors are
    # the inputs `[packed, scales, biases]`
    defp quantized(%Nx.Tensor{shape: {a, b}, type: type} = t, format, inputs, device) do
      {bits, group_size, transposed} = format
      {rows, columns} = if transposed, do: {b, a}, else: {a, b}
      storage = ExMLX.Backend.storage_type(type)
      [packed, scales, biases] = inputs

      tensor = fn ref, shape, type ->
        %ExMLX.Tensor{ref: ref, shape: shape, type: type, device: device}
      end

      quantization = %Quantization{
        packed: tensor.(packed, {rows, div(columns * bits, 32)}, {:u, 32}),
        scales: tensor.(scales, {rows, div(columns, group_size)}, storage),
        biases: tensor.(biases, {rows, div(columns, group_size)}, storage),
        bits: bits,
        group_size: group_size,
        transposed: transposed
      }

      %{t | data: %ExMLX.Backend{ref: nil, device: device, quantization: quantization}}
    end

    @doc """
    The reference a program's input reads from the argument `t`: its own,
    or one of its stored tensors' (`component`), which must be on `device`.
    """
    def input_ref(
          %Nx.Tensor{data: %ExMLX.Backend{quantization: %Quantization{} = q}} = t,
          component,
          device
        )
        when component in [:packed, :scales, :biases] do
      %ExMLX.Tensor{ref: ref, device: on} = Map.fetch!(q, component)

      if on != device,
        do:
          raise(
            ArgumentError,
            "a quantized argument (#{Quantization.describe(t)}) is on #{inspect(on)}, " <>
              "the program on #{inspect(device)}: quantize it on #{inspect(device)}"
          )

      ref
    end
  end
end
