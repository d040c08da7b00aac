defmodule ExMLX.ProgramTest do
  # Programs recorded from ExMLX.Op calls (what ExMLX.Compiler does for a
  # defn graph) and run in one NIF call, checked against values computed
  # here by hand.
  use ExUnit.Case, async: true

  alias ExMLX.{Call, Native, Op, Tensor}
  import ExMLX.TestHelpers, only: [f32: 1]

  # (a + b) * 2.5 and sum(a): a constant made outside the recording is
  # captured; an op on constants only runs for real (and is captured too).
  defp record do
    c = ExMLX.full(2.5, {:f, 32}, {})

    {outputs, recording} =
      Op.record_program(2, :cpu, fn [a, b] ->
        {sum, :cpu} = Op.defer(:add, [a, b], [])
        {scaled, :cpu} = Op.defer(:multiply, [sum, c.ref], [], {:f, 32})
        {total, :cpu} = Op.defer(:sum, [a], [nil, false])
        {folded, :cpu} = Op.defer(:add, [c.ref, c.ref], [])
        [scaled, total, folded]
      end)

    {inputs, constants, instructions, output_slots} = Op.program(recording, 2, outputs)
    {Native.program_new(:cpu, inputs, constants, instructions, output_slots), instructions}
  end

  test "a recorded program runs in one call, with its constants" do
    {program, instructions} = record()
    assert is_reference(program)
    # add, multiply, sum: the op on constants only was not recorded
    assert Enum.map(instructions, &elem(&1, 0)) == [:add, :multiply, :sum]

    a = f32([1.0, 2.0, 3.0])
    b = f32([0.5, 0.5, 1.0])
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
    a = f32([1.0])

    assert {:error, {:argument, "inputs: the program takes 2 inputs, got 1"}} =
             Native.program_run(make_ref(), program, [a.ref])

    assert {:error, {:argument, "program: expected a program reference, got: :nope"}} =
             Native.program_run(make_ref(), :nope, [a.ref])

    assert {:error,
            {:argument,
             "program: instruction 0 (add): reads slot 1, which is not written before it"}} =
             Native.program_new(:cpu, 1, [], [{:add, [0, 1], [], :any, 1}], [1])

    assert {:error, {:argument, "instructions: sum takes 2 parameters, got 0"}} =
             Native.program_new(:cpu, 1, [], [{:sum, [0], [], :any, 1}], [1])

    assert {:error, {:argument, "op: unknown op :nope (ExMLX.Native.op_table/0 lists them)"}} =
             Native.program_new(:cpu, 1, [], [{:nope, [0], [], :any, 1}], [1])
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
end
