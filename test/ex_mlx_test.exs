defmodule ExMLXTest do
  use ExUnit.Case, async: true
  doctest ExMLX

  alias ExMLX.Tensor
  import ExMLX.TestHelpers, only: [device_for: 1]

  describe "from_binary/4 and to_binary/1" do
    # One element pair per type; the sums are worked out by hand below.
    @cases [
      {{:u, 8}, <<200, 7>>, {2}},
      {{:u, 16}, <<65535::16-little, 1::16-little>>, {2}},
      {{:u, 32}, <<4_000_000_000::32-little, 5::32-little>>, {2}},
      {{:u, 64}, <<18_000_000_000_000_000_000::64-little, 9::64-little>>, {2}},
      {{:s, 8}, <<-128::8-signed, 127::8-signed>>, {2}},
      {{:s, 16}, <<-300::16-signed-little, 300::16-signed-little>>, {2}},
      {{:s, 32}, <<-70_000::32-signed-little, 1::32-signed-little>>, {1, 2}},
      {{:s, 64}, <<-5_000_000_000::64-signed-little, 3::64-signed-little>>, {2, 1}},
      {{:f, 16}, <<1.5::16-float-little, -2.25::16-float-little>>, {2}},
      {{:bf, 16}, <<0x3FC0::16-little, 0xC010::16-little>>, {2}},
      {{:f, 32}, <<0.1::32-float-little, -3.5::32-float-little>>, {2}},
      {{:f, 64}, <<0.1::64-float-little, 0.2::64-float-little>>, {2}},
      {{:c, 64}, <<1.0::32-float-little, 2.0::32-float-little>>, {1}},
      {:bool, <<1, 0, 1>>, {3}}
    ]

    for {type, data, shape} <- @cases do
      test "round-trips #{inspect(type)} exactly" do
        t =
          ExMLX.from_binary(
            unquote(data),
            unquote(Macro.escape(type)),
            unquote(Macro.escape(shape)),
            device: device_for(unquote(Macro.escape(type)))
          )

        assert %Tensor{type: unquote(Macro.escape(type)), shape: unquote(Macro.escape(shape))} = t
        assert ExMLX.to_binary(t) == unquote(data)
      end
    end

    test "rank 0 and empty tensors" do
      scalar = ExMLX.from_binary(<<42::32-signed-little>>, {:s, 32}, {})
      assert scalar.shape == {}
      assert ExMLX.to_binary(scalar) == <<42::32-signed-little>>

      empty = ExMLX.from_binary(<<>>, {:f, 32}, {3, 0})
      assert empty.shape == {3, 0}
      assert ExMLX.size(empty) == {0, 0}
      assert ExMLX.to_binary(empty) == <<>>
    end

    test "a binary of the wrong size is an error naming the sizes" do
      assert_raise ExMLX.Error,
                   ~r/data: binary has 5 bytes, but shape \{2\} of \{:f, 32\} needs 8/,
                   fn ->
                     ExMLX.from_binary(<<0, 0, 0, 0, 0>>, {:f, 32}, {2})
                   end
    end

    test "bad types, shapes and devices are named" do
      assert_raise ExMLX.Error, ~r/unsupported type \{:f, 8\}/, fn ->
        ExMLX.from_binary(<<0>>, {:f, 8}, {1})
      end

      assert_raise ExMLX.Error, ~r/type: expected a type/, fn ->
        ExMLX.from_binary(<<0>>, "u8", {1})
      end

      assert_raise ExMLX.Error, ~r/shape: dimension 1 is -2/, fn ->
        ExMLX.from_binary(<<>>, {:u, 8}, {1, -2})
      end

      assert_raise ExMLX.Error,
                   ~r/device: expected a device, :cpu, :gpu or a stream \({:gpu, 1}\), got: :tpu/,
                   fn ->
                     ExMLX.from_binary(<<0>>, {:u, 8}, {1}, device: :tpu)
                   end

      assert_raise ExMLX.Error, ~r/:bool elements must be 0 or 1/, fn ->
        ExMLX.from_binary(<<0, 2>>, :bool, {2})
      end
    end
  end

  describe "add/2" do
    test "adds integers with wrap-around" do
      a = ExMLX.from_binary(<<200, 7>>, {:u, 8}, {2})
      b = ExMLX.from_binary(<<100, 1>>, {:u, 8}, {2})
      # 200 + 100 = 300 = 256 + 44
      assert ExMLX.add(a, b) |> ExMLX.to_binary() == <<44, 8>>
    end

    test "adds f64 without narrowing to f32" do
      a = ExMLX.from_binary(<<0.1::64-float-little>>, {:f, 64}, {1}, device: :cpu)
      b = ExMLX.from_binary(<<0.2::64-float-little>>, {:f, 64}, {1}, device: :cpu)
      sum = ExMLX.add(a, b)
      assert sum.type == {:f, 64}
      # 0.1 + 0.2 in IEEE double is 0.30000000000000004; in f32 it would differ.
      assert <<0.30000000000000004::64-float-little>> == ExMLX.to_binary(sum)
    end

    test "adds f16, bf16 and c64" do
      f16 = ExMLX.from_binary(<<1.5::16-float-little>>, {:f, 16}, {1})
      assert ExMLX.add(f16, f16) |> ExMLX.to_binary() == <<3.0::16-float-little>>

      # bf16 0x3FC0 is 1.5; 1.5 + 1.5 = 3.0 is 0x4040 (the top half of f32 3.0)
      bf16 = ExMLX.from_binary(<<0x3FC0::16-little>>, {:bf, 16}, {1})
      assert ExMLX.add(bf16, bf16) |> ExMLX.to_binary() == <<0x4040::16-little>>

      # (1 + 2i) + (3 + 4i) = 4 + 6i
      a = ExMLX.from_binary(<<1.0::32-float-little, 2.0::32-float-little>>, {:c, 64}, {})
      b = ExMLX.from_binary(<<3.0::32-float-little, 4.0::32-float-little>>, {:c, 64}, {})

      assert ExMLX.add(a, b) |> ExMLX.to_binary() ==
               <<4.0::32-float-little, 6.0::32-float-little>>
    end

    test "broadcasts a row over a matrix" do
      m = ExMLX.from_binary(<<1, 2, 3, 4, 5, 6>>, {:u, 8}, {2, 3})
      row = ExMLX.from_binary(<<10, 20, 30>>, {:u, 8}, {3})
      sum = ExMLX.add(m, row)
      assert sum.shape == {2, 3}
      assert ExMLX.to_binary(sum) == <<11, 22, 33, 14, 25, 36>>
    end

    test "shapes that do not broadcast are an MLX error, not a crash" do
      a = ExMLX.from_binary(<<1, 2>>, {:u, 8}, {2})
      b = ExMLX.from_binary(<<1, 2, 3>>, {:u, 8}, {3})
      assert_raise ExMLX.Error, ~r/broadcast/i, fn -> ExMLX.add(a, b) end
    end

    test "something that is not a tensor is named" do
      a = ExMLX.from_binary(<<1>>, {:u, 8}, {1})

      assert {:error, {:argument, "b: expected a tensor reference, got: :nope"}} =
               ExMLX.Native.op(make_ref(), :add, [a.ref, :nope], [])
    end
  end

  describe "queries" do
    test "shape, type and device come from the native tensor" do
      t = ExMLX.from_binary(<<0::8*24>>, {:s, 16}, {3, 4})
      assert ExMLX.shape(t) == {3, 4}
      assert ExMLX.type(t) == {:s, 16}
      assert ExMLX.device(t) == ExMLX.default_device()
      assert ExMLX.size(t) == {12, 24}
    end

    test "inspect shows type, shape and device" do
      t = ExMLX.from_binary(<<0::8*24>>, {:s, 16}, {3, 4})
      assert inspect(t) == "#ExMLX.Tensor<s16[3][4] #{ExMLX.default_device()}>"
    end

    test "lazy results are computed by eval" do
      a = ExMLX.from_binary(<<1.0::32-float-little>>, {:f, 32}, {})
      assert ExMLX.add(a, a) |> ExMLX.eval() |> ExMLX.to_binary() == <<2.0::32-float-little>>
    end
  end
end
