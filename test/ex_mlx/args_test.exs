defmodule ExMLX.ArgsTest do
  # Wrong arguments to the public API are ArgumentErrors that name the
  # argument (never a FunctionClauseError or a bare badarg).
  use ExUnit.Case, async: true

  setup do
    %{t: ExMLX.iota({:f, 32}, {2, 3})}
  end

  test "a non-tensor where a tensor goes", %{t: t} do
    assert_raise ArgumentError, "a: expected an ExMLX.Tensor, got: 1", fn -> ExMLX.add(1, t) end

    assert_raise ArgumentError, "b: expected an ExMLX.Tensor, got: [1]", fn ->
      ExMLX.add(t, [1])
    end

    assert_raise ArgumentError, "tensor: expected an ExMLX.Tensor, got: :x", fn ->
      ExMLX.reshape(:x, {6})
    end

    assert_raise ArgumentError, "on_false: expected an ExMLX.Tensor, got: nil", fn ->
      ExMLX.select(t, t, nil)
    end

    assert_raise ArgumentError, "indices: expected an ExMLX.Tensor, got: [0]", fn ->
      ExMLX.take(t, [0])
    end
  end

  test "lists of tensors", %{t: t} do
    assert_raise ArgumentError, "tensors: expected a list of ExMLX.Tensor, got: {1, 2}", fn ->
      ExMLX.concatenate({1, 2})
    end

    assert_raise ArgumentError,
                 "tensors: expected a list of ExMLX.Tensor, got an element: 3",
                 fn -> ExMLX.stack([t, 3]) end
  end

  test "options", %{t: t} do
    assert_raise ArgumentError, "opts: expected a keyword list, got: :bad", fn ->
      ExMLX.sum(t, :bad)
    end

    assert_raise ArgumentError, ~r/unknown keys \[:axis\] in \[axis: 0\]/, fn ->
      ExMLX.sum(t, axis: 0)
    end

    assert ExMLX.sum(t, axes: [0]) |> ExMLX.to_list() == [3.0, 5.0, 7.0]
  end

  test "slice starts", %{t: t} do
    # (checked by the op's NIF, which names the parameter)
    assert_raise ExMLX.Error, "starts: expected a list of integers, got: 0", fn ->
      ExMLX.slice(t, 0, [1])
    end

    assert_raise ArgumentError,
                 "starts: expected a list of integers or an integer tensor, got: [0.5, 0]",
                 fn -> ExMLX.dynamic_slice(t, [0.5, 0], [1, 1]) end
  end

  test "dynamic_slice clamps starts beyond 64 bits instead of wrapping them", %{t: t} do
    # 2^64 written as s64 without clamping would wrap to 0; clamped, the
    # start is past the end and moves back to the last valid one (Nx's rule).
    assert ExMLX.dynamic_slice(t, [0, Bitwise.bsl(1, 64)], [1, 1]) |> ExMLX.to_list() == [2.0]
    assert ExMLX.dynamic_slice(t, [0, -Bitwise.bsl(1, 64)], [1, 1]) |> ExMLX.to_list() == [0.0]
  end

  test "dynamic_slice clamps tensor starts of any integer type in range" do
    row = ExMLX.iota({:f, 32}, {1, 1000})

    for {type, start, expected} <- [
          # a u8 start against a limit (999) that u8 cannot hold
          {{:u, 8}, 240, 240.0},
          {{:u, 64}, 0xFFFFFFFFFFFFFFFF, 999.0},
          {{:s, 64}, 0x7FFFFFFFFFFFFFFF, 999.0},
          {{:s, 64}, -0x8000000000000000, 0.0},
          {{:s, 8}, -5, 0.0}
        ] do
      {_, bits} = type
      data = <<0::size(bits)-little, start::size(bits)-little>>
      starts = ExMLX.from_binary(data, type, {2})
      assert ExMLX.dynamic_slice(row, starts, [1, 1]) |> ExMLX.to_list() == [expected]

      # the same starts computed by an op (clamped by MLX ops, not on the host)
      computed = ExMLX.add(starts, ExMLX.full(0, type, {2}))
      assert ExMLX.dynamic_slice(row, computed, [1, 1]) |> ExMLX.to_list() == [expected]
      written = ExMLX.put_slice(row, computed, ExMLX.full(-1.0, {:f, 32}, {1, 1}))
      assert written |> ExMLX.to_list() |> Enum.find_index(&(&1 == -1.0)) == trunc(expected)
    end
  end

  test "wire bundles", %{t: t} do
    assert_raise ArgumentError, "tensors: expected a map, got: [1]", fn ->
      ExMLX.Wire.encode_bundle([1])
    end

    assert_raise ArgumentError, "metadata: expected a map, got: [1]", fn ->
      ExMLX.Wire.encode_bundle(%{"t" => t}, [1])
    end

    assert_raise ArgumentError, "tensors: expected string keys and values, got: {1}", fn ->
      ExMLX.Wire.encode_bundle(%{{1} => t})
    end

    assert ExMLX.Wire.decode_bundle(7) ==
             {:error, {:argument, "bundle: expected a binary, got: 7"}}

    assert_raise ArgumentError, "opts: expected a keyword list, got: 1", fn ->
      ExMLX.Wire.decode(ExMLX.Wire.encode(t), 1)
    end
  end

  test "memory helpers" do
    assert_raise ArgumentError, "fun: expected a function of no arguments, got: 1", fn ->
      ExMLX.Memory.profile(:x, 1)
    end

    assert_raise ArgumentError, "bytes: expected an integer, got: 1.5", fn ->
      ExMLX.Memory.format_bytes(1.5)
    end

    assert_raise ArgumentError,
                 ~r/expected a list of profile reports or of monitor samples/,
                 fn ->
                   ExMLX.Memory.summary([%{active: 1, peak: 2, cache: 3}, :other])
                 end
  end
end
