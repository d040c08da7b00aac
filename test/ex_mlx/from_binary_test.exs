defmodule ExMLX.FromBinaryTest do
  # from_binary on the CPU copies on the calling thread (a normal scheduler
  # up to 1 MB, a dirty one above); other devices go through the worker.
  use ExUnit.Case, async: true

  for bytes <- [0, 4, 64 * 1024, 1024 * 1024, 1024 * 1024 + 4, 3 * 1024 * 1024] do
    test "#{bytes} bytes round-trip and feed worker ops" do
      n = div(unquote(bytes), 4)
      data = for i <- 0..(n - 1)//1, into: <<>>, do: <<i::32-signed-little>>
      t = ExMLX.from_binary(data, {:s, 32}, {n})
      assert {t.shape, t.type, t.device} == {{n}, {:s, 32}, :cpu}
      assert ExMLX.to_binary(t) == data
      # the worker computes with it: the sum of 0..n-1 is n(n-1)/2
      assert ExMLX.sum(ExMLX.as_type(t, {:s, 64})) |> ExMLX.item() == div(n * (n - 1), 2)
    end
  end

  test "both calling-thread NIFs refuse what the worker path refuses" do
    assert {:error, {:argument, "data: binary has 3 bytes, but shape {2} of {:u, 16} needs 4"}} =
             ExMLX.Native.from_binary_here(<<1, 2, 3>>, {:u, 16}, {2})

    assert {:error, {:argument, "data: binary has 3 bytes, but shape {2} of {:u, 16} needs 4"}} =
             ExMLX.Native.from_binary_here_dirty(<<1, 2, 3>>, {:u, 16}, {2})

    max = ExMLX.here_normal_max()
    big = :binary.copy(<<0>>, max + 1)
    message = "data: #{max + 1} bytes is more than this NIF copies on a normal scheduler (#{max})"

    assert {:error, {:argument, ^message}} =
             ExMLX.Native.from_binary_here(big, {:u, 8}, {max + 1})

    assert {:ok, _} = ExMLX.Native.from_binary_here(binary_part(big, 0, max), {:u, 8}, {max})
  end
end
