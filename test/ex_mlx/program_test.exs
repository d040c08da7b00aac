defmodule ExMLX.ProgramTest do
  # Programs recorded from ExMLX.Op calls (what ExMLX.Compiler does for a
  # defn graph) and run in one NIF call, checked against values computed
  # here by hand.
  use ExUnit.Case, async: true

  alias ExMLX.{Call, Native, Op, Tensor}
  import ExMLX.TestHelpers, only: [f32: 1]

  # (a + b) * 2.5 and sum(a): a constant made outside the recording is
  # captured; an op on constants only runs for real (and is captured too).
  # (CPU programs: their tensors are made on the CPU whatever the default
  # device is)
  defp record do
    c = ExMLX.full(2.5, {:f, 32}, {}, device: :cpu)

    {outputs, recording} =
      Op.record_program(2, :cpu, fn [a, b] ->
        {sum, :cpu} = Op.defer(:add, [a, b], [])
        {scaled, :cpu} = Op.defer(:multiply, [sum, c.ref], [], {:f, 32})
        {total, :cpu} = Op.defer(:sum, [a], [nil, false])
        {folded, :cpu} = Op.defer(:add, [c.ref, c.ref], [])
        [scaled, total, folded]
      end)

    {inputs, constants, instructions, output_slots} = Op.program(recording, 2, outputs)
    {Native.program_new(:cpu, inputs, constants, instructions, output_slots, false), instructions}
  end

  test "a recorded program runs in one call, with its constants" do
    {program, instructions} = record()
    assert is_reference(program)
    # add, multiply, sum: the op on constants only was not recorded
    assert Enum.map(instructions, &elem(&1, 0)) == [:add, :multiply, :sum]

    a = on_cpu(f32([1.0, 2.0, 3.0]))
    b = on_cpu(f32([0.5, 0.5, 1.0]))
    results = Call.run(&Native.program_run(&1, program, [a.ref, b.ref]))
    [scaled, total, folded] = Enum.map(results, &Tensor.wrap/1)
    assert ExMLX.to_list(scaled) == [3.75, 6.25, 10.0]
    assert ExMLX.to_list(total) == [6.0]
    assert ExMLX.to_list(folded) == [5.0]

    # the same program, other inputs
    results = Call.run(&Native.program_run(&1, program, [b.ref, b.ref]))
    assert results |> hd() |> Tensor.wrap() |> ExMLX.to_list() == [2.5, 2.5, 5.0]
  end

  test "reading data while recording is refused" do
    assert_raise Op.Unrecordable, "reading a tensor's data needs data at run time", fn ->
      Op.record_program(1, :cpu, fn [a] -> Op.to_binary(a) end)
    end

    assert_raise Op.Unrecordable, "reading a number needs data at run time", fn ->
      Op.record_program(1, :cpu, fn [a] -> Op.item(a) end)
    end
  end

  test "malformed programs and calls are named errors" do
    {program, _} = record()
    a = on_cpu(f32([1.0]))

    assert {:error, {:argument, "inputs: the program takes 2 inputs, got 1"}} =
             Native.program_run(make_ref(), program, [a.ref])

    assert {:error, {:argument, "program: expected a program reference, got: :nope"}} =
             Native.program_run(make_ref(), :nope, [a.ref])

    assert {:error,
            {:argument,
             "program: instruction 0 (add): reads slot 1, which is not written before it"}} =
             Native.program_new(:cpu, 1, [], [{:add, [0, 1], [], :any, 1}], [1], false)

    assert {:error, {:argument, "instructions: sum takes 2 parameters, got 0"}} =
             Native.program_new(:cpu, 1, [], [{:sum, [0], [], :any, 1}], [1], false)

    assert {:error, {:argument, "op: unknown op :nope (ExMLX.Native.op_table/0 lists them)"}} =
             Native.program_new(:cpu, 1, [], [{:nope, [0], [], :any, 1}], [1], false)
  end

  test "the program cache compiles a key once" do
    key = {make_ref(), :cpu, []}
    parent = self()
    first = ExMLX.ProgramCache.fetch(key, fn -> send(parent, :compiled) && :one end)
    second = ExMLX.ProgramCache.fetch(key, fn -> send(parent, :compiled) && :two end)
    assert {first, second} == {:one, :one}
    assert_received :compiled
    refute_received :compiled
  end

  # Every parameter kind of the op table through the program format:
  # written by ExMLX.ProgramFormat, read by the Rust reader, then run.
  # Slots: 0 the input x, 1 the constant c (2), then one per result.
  test "a program written in the program format loads and runs" do
    c = ExMLX.full(2, {:s, 32}, {}, device: :cpu)

    instructions = [
      # 2: a = x + c
      {:add, [0, 1], [], :any, 1},
      # 3: f = a as f32 (a Type parameter, and a cast)
      {:as_type, [2], [{:f, 32}], {:f, 32}, 1},
      # 4: s = sum(f, axes: [0], keep_dims) (OptInts, Bool)
      {:sum, [3], [[0], true], :any, 1},
      # 5: r = reshape(a, {2, 2}) (Shape); 6: t = transpose(r) (OptInts nil)
      {:reshape, [2], [{2, 2}], :any, 1},
      {:transpose, [5], [nil], :any, 1},
      # 7: p = pad(t, c, [{1, 0}, {0, 0, 1}]) (PadConfig)
      {:pad, [6, 1], [[{1, 0}, {0, 0, 1}]], :any, 1},
      # 8: q = sort(a, axis: -1, direction: :desc) (Int, Direction)
      {:sort, [2], [-1, :desc], :any, 1},
      # 9: w = window_sum(r, [1, 2], padding [{0, 0}, {0, 1}]) (Ints, OptPairs)
      {:window_sum, [5], [[1, 2], nil, [{0, 0}, {0, 1}], nil], :any, 1},
      # 10: z = full({1.5, -2.0}, c64, {}, cpu) (Scalar, Device); 11: e = f · f (Str)
      {:full, [], [{1.5, -2.0}, {:c, 64}, {}, :cpu], :any, 1},
      {:einsum, [3, 3], ["i,i->"], :any, 1},
      # 12: i = eye(2, f32) (OptInt nil); 13: m = reshape(f); 14: l = solve (Triangular)
      {:eye, [], [2, {:f, 32}, nil, :cpu], :any, 1},
      {:reshape, [3], [{2, 2}], :any, 1},
      {:nx_solve, [12, 13], [:lower, {:f, 32}], :any, 1},
      # 15: k = nx_qr's r of m (Float) — two results: 15, 16
      {:nx_qr, [13], [false, 1.0e-10, {:f, 32}], :any, 2}
    ]

    bytes = ExMLX.ProgramFormat.encode(:cpu, 1, [c], instructions, Enum.to_list(2..16))
    assert {program, :cpu} = Call.run(&Native.program_load(&1, bytes))

    x =
      ExMLX.from_binary(<<1::32-little, 5::32-little, 3::32-little, 4::32-little>>, {:s, 32}, {4},
        device: :cpu
      )

    results = Call.run(&Native.program_run(&1, program, [x.ref])) |> Enum.map(&Tensor.wrap/1)
    [a, f, s, r, t, p, q, w, z, e, i, m, l, _q, _r] = Enum.map(results, &ExMLX.to_list/1)
    assert a == [3, 7, 5, 6]
    assert f == [3.0, 7.0, 5.0, 6.0]
    assert s == [21.0]
    assert r == [3, 7, 5, 6]
    assert t == [3, 5, 7, 6]
    assert p == [2, 2, 2, 3, 2, 5, 7, 2, 6]
    assert q == [7, 6, 5, 3]
    assert w == [10, 7, 11, 6]
    assert z == [{1.5, -2.0}]
    assert e == [119.0]
    assert i == [1.0, 0.0, 0.0, 1.0]
    assert m == [3.0, 7.0, 5.0, 6.0]
    assert l == [3.0, 7.0, 5.0, 6.0]
  end

  test "damaged program bytes are named errors" do
    {program_bytes, _} = encoded_sample()
    n = byte_size(program_bytes)

    for at <- [0, 9, div(n, 2), n - 1] do
      <<head::binary-size(at), byte, rest::binary>> = program_bytes
      damaged = <<head::binary, Bitwise.bxor(byte, 0xFF), rest::binary>>
      assert {:error, {:argument, "program: " <> _}} = load(damaged)
    end

    assert {:error, {:argument, "program: not an ExMLX program (bad magic)"}} = load("nope")

    assert {:error, {:argument, "program: expected a binary, got: :nope"}} =
             Native.program_load(make_ref(), :nope)
  end

  defp load(bytes) do
    case Native.program_load(make_ref(), bytes) do
      :ok -> receive(do: ({_, reply} -> reply))
      other -> other
    end
  end

  defp encoded_sample do
    {outputs, recording} =
      Op.record_program(1, :cpu, fn [x] ->
        {y, _} = Op.defer(:negate, [x], [])
        [y]
      end)

    {inputs, constants, instructions, slots} = Op.program(recording, 1, outputs)
    {ExMLX.ProgramFormat.encode(:cpu, inputs, constants, instructions, slots), slots}
  end

  defp on_cpu(t), do: ExMLX.transfer(t, :cpu)
end
