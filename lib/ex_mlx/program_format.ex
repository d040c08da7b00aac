defmodule ExMLX.ProgramFormat do
  @moduledoc false
  # Writes programs in the program format (docs/program-format.md), which
  # native/ex_mlx/core/src/program_format.rs reads. Parameters are written
  # by their kinds in the op table (ExMLX.OpTable), the same the reader
  # checks them against; constants as wire-format frames.

  import Bitwise

  @magic "EXMLXPRG"
  @version 2

  # The kinds in the order of their tags (KIND_TAGS in program_format.rs).
  @kinds [:Int, :OptInt, :Ints, :OptInts, :Bool, :Float, :Type, :Shape, :OptPairs] ++
           [:PadConfig, :Scalar, :Device, :Direction, :Triangular, :Str]

  @doc "The kinds, by tag."
  def kinds, do: @kinds

  @doc """
  The bytes of a program: `device`, how many `inputs` it takes, its
  `constants` (ExMLX tensors), `instructions` (ops `{op, [slot], [param],
  cast, results}`, loops and branches, as ExMLX.Op.program/3 gives them)
  and output slots.
  """
  def encode(device, inputs, constants, instructions, outputs) do
    names = instructions |> op_names([]) |> Enum.reverse() |> Enum.uniq()
    index = Map.new(Enum.with_index(names))

    body = [
      @magic,
      <<@version::little-16, device_code(device), inputs::little-32>>,
      <<length(constants)::little-32>>,
      Enum.map(constants, fn t ->
        frame = ExMLX.Wire.encode(t)
        <<byte_size(frame)::little-32, frame::binary>>
      end),
      <<length(names)::little-32>>,
      Enum.map(names, fn name ->
        text = Atom.to_string(name)
        <<byte_size(text)::little-16, text::binary>>
      end),
      block({instructions, outputs}, index)
    ]

    body = IO.iodata_to_binary(body)
    <<body::binary, :erlang.crc32(body)::little-32>>
  end

  # The op names of `instructions`, in loops and branches too (reversed).
  defp op_names(instructions, acc) do
    Enum.reduce(instructions, acc, fn
      {:while, _initial, {c, _}, {b, _}}, acc ->
        op_names(b, op_names(c, acc))

      {:cond, clauses, {last, _}}, acc ->
        clauses
        |> Enum.reduce(acc, fn {{p, _}, {b, _}}, acc -> op_names(b, op_names(p, acc)) end)
        |> then(&op_names(last, &1))

      op, acc ->
        [elem(op, 0) | acc]
    end)
  end

  defp block({instructions, outputs}, index) do
    [
      <<length(instructions)::little-32>>,
      Enum.map(instructions, &instruction(&1, index)),
      slots(outputs)
    ]
  end

  defp slots(slots), do: [<<length(slots)::little-32>>, Enum.map(slots, &<<&1::little-32>>)]

  defp instruction({:while, initial, condition, body}, index),
    do: [<<1>>, slots(initial), block(condition, index), block(body, index)]

  defp instruction({:cond, clauses, last}, index) do
    [
      <<2, length(clauses)::little-32>>,
      Enum.map(clauses, fn {p, b} -> [block(p, index), block(b, index)] end),
      block(last, index)
    ]
  end

  defp instruction({name, slots, params, cast, results}, index) do
    kinds = Enum.map(ExMLX.OpTable.fetch!(name).params, & &1.kind)

    [
      <<0, Map.fetch!(index, name)::little-16, length(slots)::little-16>>,
      Enum.map(slots, &<<&1::little-32>>),
      <<length(params)::little-16>>,
      Enum.zip_with(kinds, params, &param/2),
      if(cast == :any, do: <<0>>, else: [<<1>>, type(cast)]),
      <<results>>
    ]
  end

  defp param(kind, value) do
    tag = Enum.find_index(@kinds, &(&1 == kind))
    [<<tag>>, payload(kind, value)]
  end

  defp payload(:Int, v), do: int(v)
  defp payload(:OptInt, nil), do: <<0>>
  defp payload(:OptInt, v), do: [<<1>>, int(v)]
  defp payload(:Ints, v), do: ints(v)
  defp payload(:OptInts, nil), do: <<0>>
  defp payload(:OptInts, v), do: [<<1>>, ints(v)]
  defp payload(:Bool, v), do: flag(v)
  defp payload(:Float, v), do: float(v)
  defp payload(:Type, v), do: type(v)
  defp payload(:Shape, v), do: ints(v)
  defp payload(:OptPairs, nil), do: <<0>>

  defp payload(:OptPairs, pairs),
    do: [<<1, length(pairs)::little-32>>, Enum.map(pairs, fn {lo, hi} -> [int(lo), int(hi)] end)]

  defp payload(:PadConfig, config) do
    [
      <<length(config)::little-32>>,
      Enum.map(config, fn
        {lo, hi} -> [int(lo), int(hi), int(0)]
        {lo, hi, interior} -> [int(lo), int(hi), int(interior)]
      end)
    ]
  end

  defp payload(:Scalar, v) when is_integer(v), do: <<0, v::little-signed-128>>
  defp payload(:Scalar, {re, im}), do: [<<2>>, float(re), float(im)]
  defp payload(:Scalar, v), do: [<<1>>, float(v)]
  defp payload(:Device, device), do: <<device_code(device)>>
  defp payload(:Direction, direction), do: flag(direction == :desc)
  defp payload(:Triangular, nil), do: <<0>>
  defp payload(:Triangular, :lower), do: <<1>>
  defp payload(:Triangular, :upper), do: <<2>>
  defp payload(:Str, text), do: <<byte_size(text)::little-32, text::binary>>

  defp int(v), do: <<v::little-signed-64>>
  defp ints(v) when is_tuple(v), do: ints(Tuple.to_list(v))
  defp ints(v), do: [<<length(v)::little-32>>, Enum.map(v, &int/1)]
  defp flag(true), do: <<1>>
  defp flag(false), do: <<0>>
  defp float(:nan), do: <<0x7FF8000000000000::little-64>>
  defp float(:infinity), do: <<0x7FF0000000000000::little-64>>
  defp float(:neg_infinity), do: <<0xFFF0000000000000::little-64>>
  defp float(v), do: <<v * 1.0::little-float-64>>

  defp type(:bool), do: <<4, "bool", 8>>

  defp type({kind, bits}) do
    text = Atom.to_string(kind)
    <<byte_size(text), text::binary, bits &&& 0xFF>>
  end

  defp device_code(:cpu), do: 0
  defp device_code(:gpu), do: 1
end
