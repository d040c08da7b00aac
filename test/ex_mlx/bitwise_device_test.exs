defmodule ExMLX.BitwiseDeviceTest do
  use ExUnit.Case, async: true

  import ExMLX.TestHelpers

  describe "bitwise" do
    test "and, or, xor, not, shifts" do
      a = u8([0b1100, 0b1010, 255])
      b = u8([0b1010, 0b0110, 1])
      assert ExMLX.bitwise_and(a, b) |> ExMLX.to_list() == [0b1000, 0b0010, 1]
      assert ExMLX.bitwise_or(a, b) |> ExMLX.to_list() == [0b1110, 0b1110, 255]
      assert ExMLX.bitwise_xor(a, b) |> ExMLX.to_list() == [0b0110, 0b1100, 254]
      assert ExMLX.bitwise_not(a) |> ExMLX.to_list() == [0b11110011, 0b11110101, 0]
      assert ExMLX.left_shift(u8([1, 3]), u8([3, 7])) |> ExMLX.to_list() == [8, 128]
      # arithmetic shift for signed types: -16 >> 2 = -4
      assert ExMLX.right_shift(s32([-16, 64]), s32([2, 3])) |> ExMLX.to_list() == [-4, 8]
    end

    test "population_count and count_leading_zeros" do
      # 0 -> 0 bits, 0b1011 -> 3, 255 -> 8; leading zeros in 8 bits: 8, 4, 0
      t = u8([0, 0b1011, 255])
      assert ExMLX.population_count(t) |> ExMLX.to_list() == [0, 3, 8]
      assert ExMLX.count_leading_zeros(t) |> ExMLX.to_list() == [8, 4, 0]
      # s32: -1 has 32 set bits and no leading zero; 1 has 31 leading zeros
      s = s32([-1, 1, 0])
      assert ExMLX.population_count(s) |> ExMLX.to_list() == [32, 1, 0]
      assert ExMLX.count_leading_zeros(s) |> ExMLX.to_list() == [0, 31, 32]
      # u64 high bit
      big = ExMLX.full(Bitwise.bsl(1, 63), {:u, 64}, {1})
      assert ExMLX.count_leading_zeros(big) |> ExMLX.to_list() == [0]
      assert ExMLX.population_count(big) |> ExMLX.to_list() == [1]
    end

    test "floats are refused" do
      assert_raise ExMLX.Error, "a: bitwise operations need integer types, got {:f, 32}", fn ->
        ExMLX.bitwise_and(f32([1.0]), f32([1.0]))
      end
    end
  end

  describe "devices" do
    test "transfer to the same device keeps the values" do
      t = s32([1, 2, 3])
      assert ExMLX.transfer(t, :cpu) |> ExMLX.to_list() == [1, 2, 3]
    end

    test "the default device comes from the application environment" do
      assert ExMLX.default_device() == Application.get_env(:ex_mlx, :default_device, :cpu)
      assert ExMLX.full(1, {:u, 8}, {1}, device: :cpu).device == :cpu
    end

    if ExMLX.device_available?(:gpu) do
      test "tensors move between :cpu and :gpu and keep their values" do
        t = ExMLX.iota({:f, 32}, {4}) |> ExMLX.add(ExMLX.full(0.5, {:f, 32}, {}))
        g = ExMLX.transfer(t, :gpu)
        assert g.device == :gpu
        assert ExMLX.to_list(ExMLX.add(g, g)) == [1.0, 3.0, 5.0, 7.0]
        assert ExMLX.transfer(g, :cpu) |> ExMLX.to_list() == [0.5, 1.5, 2.5, 3.5]
      end
    else
      test "asking for :gpu without one is a clear error" do
        assert_raise ExMLX.Error, ~r/the gpu device is not available in this MLX build/, fn ->
          ExMLX.full(1, {:u, 8}, {1}, device: :gpu)
        end

        assert_raise ExMLX.Error, ~r/the gpu device is not available/, fn ->
          ExMLX.transfer(s32([1]), :gpu)
        end
      end
    end

    test "tensors on different devices cannot be mixed" do
      # Simulated with a bad reference: the message names both devices when real.
      assert {:error, {:argument, _}} =
               ExMLX.Native.op(make_ref(), :add, [:not_a_tensor, :not_either], [])
    end
  end
end

defmodule ExMLX.DeallocateTest do
  use ExUnit.Case, async: true

  test "a deallocated tensor raises an error naming what happened" do
    t = ExMLX.full(1, {:u, 8}, {2})
    assert ExMLX.deallocate(t) == :ok

    assert_raise ExMLX.Error, ~r/the tensor was deallocated/, fn -> ExMLX.to_binary(t) end
    assert_raise ExMLX.Error, ~r/the tensor was deallocated/, fn -> ExMLX.add(t, t) end
    assert ExMLX.deallocate(t) == :already_deallocated
  end
end
