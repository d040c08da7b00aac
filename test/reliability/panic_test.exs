defmodule ExMLX.Reliability.PanicTest do
  use ExUnit.Case, async: true
  @moduletag :reliability

  test "a panic inside a NIF is an Erlang error, and the VM lives on" do
    assert_raise ErlangError, fn -> ExMLX.Native.panic_for_test(make_ref(), :nif) end
    assert ExMLX.iota({:s, 32}, {3}) |> ExMLX.sum() |> ExMLX.item() == 3
  end

  test "a panic on the worker thread comes back as an :internal error, and the worker lives on" do
    assert_raise ExMLX.Error, ~r/panic in the MLX worker: deliberate test panic/, fn ->
      ExMLX.Call.run(&ExMLX.Native.panic_for_test(&1, :worker))
    end

    assert ExMLX.iota({:s, 32}, {4}) |> ExMLX.sum() |> ExMLX.item() == 6
  end
end
