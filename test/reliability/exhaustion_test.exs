defmodule ExMLX.Reliability.ExhaustionTest do
  # More memory asked for than the limit allows: an error the caller can
  # handle, nothing allocated, and normal work afterwards.
  use ExUnit.Case, async: false
  @moduletag :reliability

  alias ExMLX.Memory
  import ExMLX.TestHelpers, only: [settle: 0]

  @mb 1024 * 1024

  setup do
    previous = Memory.set_memory_limit(Memory.stats().memory_limit)
    on_exit(fn -> Memory.set_memory_limit(previous) end)
    settle()
    :ok
  end

  defp out_of_memory(fun) do
    error = assert_raise ExMLX.Error, fun
    assert error.kind == :out_of_memory, inspect(error)
    error.message
  end

  test "tensors past a low limit are refused, then work goes on" do
    before = Memory.stats().active
    Memory.set_memory_limit(64 * @mb)
    elements = div(256 * @mb, 4)

    # a creation op, a host copy and an op whose result is too big
    message = out_of_memory(fn -> ExMLX.full(1.0, {:f, 32}, {elements}) end)
    assert message =~ "#{256 * @mb} bytes"
    assert message =~ "memory limit of #{64 * @mb} bytes"

    data = :binary.copy(<<0::32>>, elements)
    out_of_memory(fn -> ExMLX.from_binary(data, {:f, 32}, {elements}) end)

    small = ExMLX.iota({:s, 64}, {4096})

    out_of_memory(fn ->
      view = ExMLX.broadcast_to(small, {8192, 4096})
      # add returns at once (its node is built in the background): the
      # refusal comes where the result is used
      ExMLX.add(view, view) |> ExMLX.eval()
    end)

    # nothing was allocated for the refused tensors
    assert Memory.stats().active - before < 1 * @mb

    # under the limit, work goes on; a view of a big shape allocates nothing
    view = ExMLX.broadcast_to(small, {8192, 4096})
    assert ExMLX.shape(view) == {8192, 4096}
    assert ExMLX.sum(view) |> ExMLX.item() == 8192 * Enum.sum(0..4095)
    assert ExMLX.iota({:s, 32}, {1000}) |> ExMLX.sum() |> ExMLX.item() == 499_500
  end

  test "a tensor larger than the machine is refused at the default limit" do
    # 4 TB of f32: the OS would overcommit it and kill the VM on first touch
    out_of_memory(fn -> ExMLX.full(0.0, {:f, 32}, {100_000, 100_000, 100}) end)
    assert ExMLX.to_list(ExMLX.iota({:s, 32}, {3})) == [0, 1, 2]
  end

  test "raising the limit again lets the same allocation through" do
    frame = ExMLX.full(7, {:u, 8}, {32 * @mb}) |> ExMLX.Wire.encode()
    settle()
    Memory.set_memory_limit(16 * @mb)
    out_of_memory(fn -> ExMLX.full(1, {:u, 8}, {32 * @mb}) end)
    out_of_memory(fn -> ExMLX.Wire.decode!(frame) end)
    assert {:error, {:out_of_memory, _}} = ExMLX.Wire.decode(frame)

    Memory.set_memory_limit(1024 * @mb)
    t = ExMLX.Wire.decode!(frame) |> ExMLX.eval()
    assert ExMLX.size(t) == {32 * @mb, 32 * @mb}
    assert ExMLX.slice(t, [32 * @mb - 1], [32 * @mb], [1]) |> ExMLX.to_list() == [7]
  end
end
