defmodule ExMLX.FromBinaryTest do
  # from_binary on the CPU copies on the calling thread (a normal scheduler
  # up to 64 KB, a dirty one above 4 MB) or on the worker (in between);
  # other devices always go through the worker (ExMLX.Call.copy_path/2).
  use ExUnit.Case, async: true
  import Bitwise

  for bytes <- [0, 4, 64 * 1024, 64 * 1024 + 4, 4 * 1024 * 1024, 4 * 1024 * 1024 + 4] do
    test "#{bytes} bytes round-trip and feed worker ops" do
      n = div(unquote(bytes), 4)
      data = for i <- 0..(n - 1)//1, into: <<>>, do: <<i::32-signed-little>>
      t = ExMLX.from_binary(data, {:s, 32}, {n})
      assert {t.shape, t.type, t.device} == {{n}, {:s, 32}, ExMLX.default_device()}
      assert ExMLX.to_binary(t) == data
      # the worker computes with it: the sum of 0..n-1 is n(n-1)/2
      assert ExMLX.sum(ExMLX.as_type(t, {:s, 64})) |> ExMLX.item() == div(n * (n - 1), 2)
    end
  end

  test "the copy paths by size and device" do
    assert ExMLX.Call.copy_path(0, :cpu) == :at_once
    assert ExMLX.Call.copy_path(64 * 1024, :cpu) == :at_once
    assert ExMLX.Call.copy_path(64 * 1024 + 1, :cpu) == :worker
    assert ExMLX.Call.copy_path(4 * 1024 * 1024, :cpu) == :worker
    assert ExMLX.Call.copy_path(4 * 1024 * 1024 + 1, :cpu) == :dirty
    assert ExMLX.Call.copy_path(16, :gpu) == :worker
    assert ExMLX.Call.copy_path(1 <<< 30, :gpu) == :worker
  end

  test "both calling-thread NIFs refuse what the worker path refuses" do
    assert {:error, {:argument, "data: binary has 3 bytes, but shape {2} of {:u, 16} needs 4"}} =
             ExMLX.Native.from_binary_at_once(<<1, 2, 3>>, {:u, 16}, {2})

    assert {:error, {:argument, "data: binary has 3 bytes, but shape {2} of {:u, 16} needs 4"}} =
             ExMLX.Native.from_binary_at_once_dirty(<<1, 2, 3>>, {:u, 16}, {2})

    max = ExMLX.Call.at_once_max()
    big = :binary.copy(<<0>>, max + 1)
    message = "data: #{max + 1} bytes is more than this NIF copies on a normal scheduler (#{max})"

    assert {:error, {:argument, ^message}} =
             ExMLX.Native.from_binary_at_once(big, {:u, 8}, {max + 1})

    assert {:ok, _} = ExMLX.Native.from_binary_at_once(binary_part(big, 0, max), {:u, 8}, {max})
  end
end
