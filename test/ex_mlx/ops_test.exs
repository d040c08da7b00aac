defmodule ExMLX.OpsTest do
  # Each family's expected values are worked out by hand in the comments.
  use ExUnit.Case, async: true

  import ExMLX.TestHelpers

  describe "element-wise unary" do
    test "integer and float basics" do
      t = f32([-2.5, -0.5, 0.0, 1.5])
      assert ExMLX.abs(t) |> ExMLX.to_list() == [2.5, 0.5, 0.0, 1.5]
      assert ExMLX.negate(t) |> ExMLX.to_list() == [2.5, 0.5, -0.0, -1.5]
      assert ExMLX.sign(t) |> ExMLX.to_list() == [-1.0, -1.0, 0.0, 1.0]
      assert ExMLX.floor(t) |> ExMLX.to_list() == [-3.0, -1.0, 0.0, 1.0]
      assert ExMLX.ceil(t) |> ExMLX.to_list() == [-2.0, -0.0, 0.0, 2.0]
      # round half away from zero (Elixir's round/1): -2.5 -> -3, -0.5 -> -1, 1.5 -> 2
      assert ExMLX.round(t) |> ExMLX.to_list() == [-3.0, -1.0, 0.0, 2.0]
      assert ExMLX.round(f32([0.49999997, -0.4, 2.5])) |> ExMLX.to_list() == [0.0, -0.0, 3.0]
      assert ExMLX.square(t) |> ExMLX.to_list() == [6.25, 0.25, 0.0, 2.25]
    end

    test "powers and roots of exact values" do
      t = f32([1.0, 4.0, 16.0])
      assert ExMLX.sqrt(t) |> ExMLX.to_list() == [1.0, 2.0, 4.0]
      assert ExMLX.rsqrt(t) |> ExMLX.to_list() == [1.0, 0.5, 0.25]
      assert ExMLX.reciprocal(t) |> ExMLX.to_list() == [1.0, 0.25, 0.0625]
      assert ExMLX.log2(t) |> ExMLX.to_list() == [0.0, 2.0, 4.0]
    end

    test "transcendental functions agree with :math" do
      xs = [0.1, 0.5, 0.9]
      t = f64(xs)

      for {op, fun} <- [
            exp: &:math.exp/1,
            log: &:math.log/1,
            sin: &:math.sin/1,
            cos: &:math.cos/1,
            tan: &:math.tan/1,
            asin: &:math.asin/1,
            acos: &:math.acos/1,
            atan: &:math.atan/1,
            sinh: &:math.sinh/1,
            cosh: &:math.cosh/1,
            tanh: &:math.tanh/1,
            asinh: &:math.asinh/1,
            atanh: &:math.atanh/1,
            erf: &:math.erf/1,
            log10: &:math.log10/1,
            log1p: &:math.log(1 + &1),
            expm1: &(:math.exp(&1) - 1),
            sigmoid: &(1 / (1 + :math.exp(-&1)))
          ] do
        got = apply(ExMLX, op, [t]) |> ExMLX.to_list()
        expected = Enum.map(xs, fun)
        assert_close(got, expected, 1.0e-12, "#{op}")
      end

      assert_close(
        ExMLX.acosh(f64([1.5, 2.0])) |> ExMLX.to_list(),
        [:math.acosh(1.5), :math.acosh(2.0)],
        1.0e-12,
        "acosh"
      )

      # erf_inv(erf(x)) = x
      assert_close(ExMLX.erf_inv(ExMLX.erf(t)) |> ExMLX.to_list(), xs, 1.0e-9, "erf_inv")
    end

    test "predicates give :bool" do
      t = f32([:nan, :infinity, :neg_infinity, 1.0])
      assert ExMLX.is_nan(t).type == :bool
      assert ExMLX.is_nan(t) |> ExMLX.to_list() == [true, false, false, false]
      assert ExMLX.is_infinity(t) |> ExMLX.to_list() == [false, true, true, false]
      assert ExMLX.is_finite(t) |> ExMLX.to_list() == [false, false, false, true]
      b = ExMLX.from_binary(<<1, 0>>, :bool, {2})
      assert ExMLX.logical_not(b) |> ExMLX.to_list() == [false, true]
    end

    test "complex parts and conjugate" do
      z = ExMLX.from_binary(<<1.0::32-float-little, 2.0::32-float-little>>, {:c, 64}, {1})
      assert ExMLX.real(z) |> ExMLX.to_list() == [1.0]
      assert ExMLX.imag(z) |> ExMLX.to_list() == [2.0]
      assert ExMLX.conjugate(z) |> ExMLX.to_list() == [{1.0, -2.0}]
    end
  end

  describe "element-wise binary" do
    test "arithmetic" do
      a = s32([7, -7, 9])
      b = s32([2, 2, -4])
      assert ExMLX.subtract(a, b) |> ExMLX.to_list() == [5, -9, 13]
      assert ExMLX.multiply(a, b) |> ExMLX.to_list() == [14, -14, -36]
      # Elixir's div/2 and rem/2: truncate toward zero, remainder has the dividend's sign
      assert ExMLX.quotient(a, b) |> ExMLX.to_list() == [3, -3, -2]
      assert ExMLX.remainder(a, b) |> ExMLX.to_list() == [1, -1, 1]
      # the same for floats (C's fmod): -7.5 rem 2 = -1.5, 7.5 rem -2 = 1.5
      assert ExMLX.remainder(f64([-7.5, 7.5]), f64([2.0, -2.0])) |> ExMLX.to_list() == [-1.5, 1.5]
      assert ExMLX.min(a, b) |> ExMLX.to_list() == [2, -7, -4]
      assert ExMLX.max(a, b) |> ExMLX.to_list() == [7, 2, 9]
      assert ExMLX.pow(s32([2, 3]), s32([10, 3])) |> ExMLX.to_list() == [1024, 27]
      assert ExMLX.divide(f32([1.0, 3.0]), f32([4.0, 2.0])) |> ExMLX.to_list() == [0.25, 1.5]

      assert_close(
        ExMLX.atan2(f64([1.0]), f64([1.0])) |> ExMLX.to_list(),
        [:math.pi() / 4],
        1.0e-15,
        "atan2"
      )

      # log(e^1 + e^2)
      assert_close(
        ExMLX.logaddexp(f64([1.0]), f64([2.0])) |> ExMLX.to_list(),
        [:math.log(:math.exp(1) + :math.exp(2))],
        1.0e-12,
        "logaddexp"
      )
    end

    test "integer quotients and remainders truncate toward zero for every sign and type" do
      # Elixir's div/2 and rem/2 give the expected values; MLX's floor_divide
      # truncates in some releases and rounds down in others
      for {type, min} <- [{{:s, 8}, -128}, {{:s, 16}, -32_768}, {{:s, 32}, -2_147_483_648}] do
        pairs =
          for a <- [7, -7, 6, -6, 1, -1, 0, min, min + 1],
              b <- [2, -2, 3, -3, 7, -7, 1],
              do: {a, b}

        {as, bs} = Enum.unzip(pairs)
        {:s, bits} = type

        a =
          ExMLX.from_binary(
            for(x <- as, into: <<>>, do: <<x::size(bits)-signed-little>>),
            type,
            {length(as)}
          )

        b =
          ExMLX.from_binary(
            for(x <- bs, into: <<>>, do: <<x::size(bits)-signed-little>>),
            type,
            {length(bs)}
          )

        assert ExMLX.quotient(a, b) |> ExMLX.to_list() ==
                 Enum.map(pairs, fn {x, y} -> div(x, y) end),
               inspect(type)

        assert ExMLX.remainder(a, b) |> ExMLX.to_list() ==
                 Enum.map(pairs, fn {x, y} -> rem(x, y) end),
               inspect(type)
      end

      assert ExMLX.quotient(u8([200, 7, 0]), u8([3, 2, 5])) |> ExMLX.to_list() == [66, 3, 0]
    end

    test "comparisons and logic give :bool" do
      a = s32([1, 2, 3])
      b = s32([2, 2, 2])
      assert ExMLX.equal(a, b) |> ExMLX.to_list() == [false, true, false]
      assert ExMLX.not_equal(a, b) |> ExMLX.to_list() == [true, false, true]
      assert ExMLX.less(a, b) |> ExMLX.to_list() == [true, false, false]
      assert ExMLX.less_equal(a, b) |> ExMLX.to_list() == [true, true, false]
      assert ExMLX.greater(a, b) |> ExMLX.to_list() == [false, false, true]
      assert ExMLX.greater_equal(a, b) |> ExMLX.to_list() == [false, true, true]

      p = u8([0, 0, 1, 5])
      q = u8([0, 3, 0, 1])
      assert ExMLX.logical_and(p, q) |> ExMLX.to_list() == [false, false, false, true]
      assert ExMLX.logical_or(p, q) |> ExMLX.to_list() == [false, true, true, true]
      assert ExMLX.logical_xor(p, q) |> ExMLX.to_list() == [false, true, true, false]
    end

    test "NaN compares unequal to itself" do
      n = f32([:nan])
      assert ExMLX.equal(n, n) |> ExMLX.to_list() == [false]
    end
  end

  describe "reductions" do
    # [[0, 1, 2], [3, 4, 5]]
    setup do: %{t: ExMLX.iota({:s, 32}, {2, 3})}

    test "over all axes and over one axis", %{t: t} do
      assert ExMLX.sum(t) |> ExMLX.item() == 15
      assert ExMLX.sum(t, axes: [0]) |> ExMLX.to_list() == [3, 5, 7]
      assert ExMLX.sum(t, axes: [-1]) |> ExMLX.to_list() == [3, 12]
      assert ExMLX.product(t, axes: [1]) |> ExMLX.to_list() == [0, 60]
      assert ExMLX.reduce_min(t, axes: [0]) |> ExMLX.to_list() == [0, 1, 2]
      assert ExMLX.reduce_max(t) |> ExMLX.item() == 5
      assert ExMLX.mean(ExMLX.as_type(t, {:f, 32}), axes: [1]) |> ExMLX.to_list() == [1.0, 4.0]
      assert ExMLX.all(t, axes: [1]) |> ExMLX.to_list() == [false, true]
      assert ExMLX.any(t) |> ExMLX.item() == true
    end

    test "keep_dims keeps size-1 axes", %{t: t} do
      assert ExMLX.sum(t, axes: [1], keep_dims: true).shape == {2, 1}
      assert ExMLX.sum(t, keep_dims: true).shape == {1, 1}
    end

    test "argmax/argmin with ties to the lowest index" do
      t = ExMLX.from_binary(<<3, 7, 7, 1, 1, 0>>, {:u, 8}, {2, 3})
      assert ExMLX.argmax(t) |> ExMLX.item() == 1
      assert ExMLX.argmin(t) |> ExMLX.item() == 5
      assert ExMLX.argmax(t, axis: 1) |> ExMLX.to_list() == [1, 0]
      assert ExMLX.argmin(t, axis: 0) |> ExMLX.to_list() == [1, 1, 1]
      assert ExMLX.argmax(t, axis: 1, keep_dims: true).shape == {2, 1}
      assert ExMLX.argmax(t, keep_dims: true).shape == {1, 1}
    end

    test "bad axes are named", %{t: t} do
      assert_raise ExMLX.Error, "axes: axis 2 is out of range for a tensor of rank 2", fn ->
        ExMLX.sum(t, axes: [2])
      end

      assert_raise ExMLX.Error, "axes: axis -1 appears twice", fn ->
        ExMLX.sum(t, axes: [1, -1])
      end

      assert_raise ExMLX.Error,
                   "op: unknown op :median (ExMLX.Native.op_table/0 lists them)",
                   fn -> ExMLX.Op.run(:median, [t.ref], [nil, false]) end
    end
  end

  describe "creation and conversion" do
    test "full, iota, eye" do
      assert ExMLX.full(-1, {:s, 8}, {2, 2}) |> ExMLX.to_list() == [-1, -1, -1, -1]
      assert ExMLX.full({1.0, -1.0}, {:c, 64}, {1}) |> ExMLX.to_list() == [{1.0, -1.0}]
      assert ExMLX.full(:infinity, {:f, 16}, {1}) |> ExMLX.to_list() == [:infinity]

      assert ExMLX.iota({:f, 32}, {2, 3}, axis: 1) |> ExMLX.to_list() == [
               0.0,
               1.0,
               2.0,
               0.0,
               1.0,
               2.0
             ]

      assert ExMLX.eye(2, {:s, 32}, m: 3) |> ExMLX.to_list() == [1, 0, 0, 0, 1, 0]
    end

    test "full refuses values the type cannot hold" do
      assert_raise ExMLX.Error, "value: -1 does not fit in {:u, 32}", fn ->
        ExMLX.full(-1, {:u, 32}, {1})
      end

      assert_raise ExMLX.Error, ~r/is not an integer/, fn -> ExMLX.full(1.5, {:s, 32}, {1}) end

      assert_raise ExMLX.Error, ~r/needs a complex type/, fn ->
        ExMLX.full({1, 2}, {:f, 32}, {1})
      end
    end

    test "as_type converts values, bitcast reinterprets bytes" do
      assert ExMLX.as_type(f32([-1.7, 2.9]), {:s, 32}) |> ExMLX.to_list() == [-1, 2]

      assert s32([3]) |> ExMLX.transfer(:cpu) |> ExMLX.as_type({:f, 64}) |> ExMLX.to_list() == [
               3.0
             ]

      assert ExMLX.as_type(u8([0, 2]), :bool) |> ExMLX.to_list() == [false, true]
      # -1 as s8 is the byte 0xFF = 255
      assert ExMLX.bitcast(ExMLX.full(-1, {:s, 8}, {1}), {:u, 8}) |> ExMLX.to_list() == [255]

      assert_raise ExMLX.Error,
                   "cannot bitcast {:f, 32} to {:f, 16}: element sizes differ (4 and 2 bytes)",
                   fn ->
                     ExMLX.bitcast(f32([1.0]), {:f, 16})
                   end
    end
  end

  describe "shape operations" do
    # [[0, 1, 2], [3, 4, 5]]
    setup do: %{t: ExMLX.iota({:s, 32}, {2, 3})}

    test "reshape, transpose, broadcast", %{t: t} do
      assert ExMLX.reshape(t, {3, 2}).shape == {3, 2}
      assert ExMLX.transpose(t) |> ExMLX.to_list() == [0, 3, 1, 4, 2, 5]
      assert ExMLX.transpose(ExMLX.iota({:s, 32}, {1, 2, 3}), [2, 0, 1]).shape == {3, 1, 2}
      assert ExMLX.broadcast_to(s32([1, 2, 3]), {2, 3}) |> ExMLX.to_list() == [1, 2, 3, 1, 2, 3]

      assert_raise ExMLX.Error,
                   "shape: cannot reshape {2, 3} (6 elements) to {4, 2} (8 elements)",
                   fn ->
                     ExMLX.reshape(t, {4, 2})
                   end

      assert_raise ExMLX.Error,
                   ~r/axes: a permutation of a rank 2 tensor needs 2 axes, got 1/,
                   fn ->
                     ExMLX.transpose(t, [0])
                   end
    end

    test "squeeze, expand_dims, flip", %{t: t} do
      assert ExMLX.squeeze(ExMLX.reshape(t, {1, 2, 1, 3}), [0]).shape == {2, 1, 3}
      assert ExMLX.expand_dims(t, [-1]).shape == {2, 3, 1}
      assert ExMLX.flip(t, [0, 1]) |> ExMLX.to_list() == [5, 4, 3, 2, 1, 0]

      assert_raise ExMLX.Error, "axes: axis 1 has size 3; only size-1 axes can be squeezed", fn ->
        ExMLX.squeeze(t, [1])
      end
    end

    test "slice with strides", %{t: t} do
      assert ExMLX.slice(t, [0, 1], [2, 3]) |> ExMLX.to_list() == [1, 2, 4, 5]
      assert ExMLX.slice(t, [0, 0], [2, 3], [1, 2]) |> ExMLX.to_list() == [0, 2, 3, 5]
      assert ExMLX.slice(t, [1, 0], [1, 3]).shape == {0, 3}

      assert_raise ExMLX.Error, "starts: axis 1: 2..4 is not within 0..3", fn ->
        ExMLX.slice(t, [0, 2], [1, 4])
      end
    end

    test "concatenate and stack", %{t: t} do
      assert ExMLX.concatenate([t, t], 1).shape == {2, 6}

      assert ExMLX.concatenate([t, t], 0) |> ExMLX.to_list() == [
               0,
               1,
               2,
               3,
               4,
               5,
               0,
               1,
               2,
               3,
               4,
               5
             ]

      assert ExMLX.stack([t, t], 0).shape == {2, 2, 3}

      assert_raise ExMLX.Error, "tensors: needs at least one tensor", fn ->
        ExMLX.concatenate([], 0)
      end
    end

    test "select, clip, pad", %{t: t} do
      even =
        ExMLX.equal(ExMLX.remainder(t, ExMLX.full(2, {:s, 32}, {})), ExMLX.full(0, {:s, 32}, {}))

      assert ExMLX.select(even, t, ExMLX.negate(t)) |> ExMLX.to_list() == [0, -1, 2, -3, 4, -5]

      assert ExMLX.clip(t, ExMLX.full(1, {:s, 32}, {}), ExMLX.full(4, {:s, 32}, {}))
             |> ExMLX.to_list() == [1, 1, 2, 3, 4, 4]

      # [[0, 1, 2], [3, 4, 5]] padded by one row on top, last column removed:
      # [[7, 7], [0, 1], [3, 4]]
      padded = ExMLX.pad(t, [{1, 0}, {0, -1}], ExMLX.full(7, {:s, 32}, {}))
      assert padded.shape == {3, 2}
      assert ExMLX.to_list(padded) == [7, 7, 0, 1, 3, 4]
    end
  end

  describe "matmul" do
    test "floats" do
      # [[1, 2], [3, 4]] · [[5, 6], [7, 8]] = [[19, 22], [43, 50]]
      a = ExMLX.reshape(f32([1, 2, 3, 4]), {2, 2})
      b = ExMLX.reshape(f32([5, 6, 7, 8]), {2, 2})
      assert ExMLX.matmul(a, b) |> ExMLX.to_list() == [19.0, 22.0, 43.0, 50.0]
    end

    test "integers exactly, vectors and batches" do
      a = ExMLX.reshape(s64([1, 2, 3, 4, 5, 6]), {2, 3})
      v = s64([1_000_000_007, 1, 1])
      # [1e9+7 + 2 + 3, 4e9+28 + 5 + 6]
      assert ExMLX.matmul(a, v) |> ExMLX.to_list() == [1_000_000_012, 4_000_000_039]
      assert ExMLX.matmul(v, v) |> ExMLX.to_list() == [1_000_000_014_000_000_051]
      batch = ExMLX.reshape(ExMLX.iota({:s, 32}, {8}), {2, 2, 2})
      # [[0,1],[2,3]]² = [[2,3],[6,11]]; [[4,5],[6,7]]² = [[46,55],[66,79]]
      assert ExMLX.matmul(batch, batch) |> ExMLX.to_list() == [2, 3, 6, 11, 46, 55, 66, 79]
    end

    test "mismatched shapes are named" do
      a = ExMLX.iota({:f, 32}, {2, 3})

      assert_raise ExMLX.Error,
                   "b: cannot multiply {2, 3} by {2, 3}: contracted dimensions 3 and 2 differ",
                   fn ->
                     ExMLX.matmul(a, a)
                   end
    end
  end
end

defmodule ExMLX.OpsSliceTest do
  use ExUnit.Case, async: true

  import ExMLX.TestHelpers

  # t = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
  setup do: %{t: ExMLX.iota({:s, 32}, {3, 3})}

  test "dynamic_slice with list and tensor starts, clamped like Nx", %{t: t} do
    assert ExMLX.dynamic_slice(t, [1, 1], [2, 2]) |> ExMLX.to_list() == [4, 5, 7, 8]
    # start (2, 2) with length (2, 2) is clamped to (1, 1)
    assert ExMLX.dynamic_slice(t, [2, 2], [2, 2]) |> ExMLX.to_list() == [4, 5, 7, 8]
    # negative starts clamp to 0
    assert ExMLX.dynamic_slice(t, s64([-5, 0]), [1, 3]) |> ExMLX.to_list() == [0, 1, 2]

    assert_raise ExMLX.Error, "lengths: axis 0: length 4 exceeds the dimension 3", fn ->
      ExMLX.dynamic_slice(t, [0, 0], [4, 1])
    end
  end

  test "put_slice writes a block, clamped to fit", %{t: t} do
    block = ExMLX.reshape(s32([-1, -2, -3, -4]), {2, 2})
    assert ExMLX.put_slice(t, [0, 1], block) |> ExMLX.to_list() == [0, -1, -2, 3, -3, -4, 6, 7, 8]
    # (5, 5) clamps to (1, 1)
    assert ExMLX.put_slice(t, [5, 5], block) |> ExMLX.to_list() == [0, 1, 2, 3, -1, -2, 6, -3, -4]
  end

  # Starts that are already computed (made from host values) are clamped on
  # the host and the slice is a static one; starts still to be computed (the
  # result of an op) are clamped by MLX ops: both give Nx's clamped blocks.
  test "starts computed by an op slice and write the same clamped blocks", %{t: t} do
    computed = fn starts -> ExMLX.add(s64(starts), s64([0, 0])) end
    assert ExMLX.dynamic_slice(t, computed.([1, 1]), [2, 2]) |> ExMLX.to_list() == [4, 5, 7, 8]
    assert ExMLX.dynamic_slice(t, computed.([2, 2]), [2, 2]) |> ExMLX.to_list() == [4, 5, 7, 8]
    assert ExMLX.dynamic_slice(t, computed.([-5, 0]), [1, 3]) |> ExMLX.to_list() == [0, 1, 2]

    block = ExMLX.reshape(s32([-1, -2, -3, -4]), {2, 2})
    written = ExMLX.put_slice(t, computed.([5, 5]), block)
    assert ExMLX.to_list(written) == [0, 1, 2, 3, -1, -2, 6, -3, -4]
    written = ExMLX.put_slice(t, computed.([-1, 1]), block)
    assert ExMLX.to_list(written) == [0, -1, -2, 3, -3, -4, 6, 7, 8]
  end

  test "interior padding, then negative edges", %{t: t} do
    row = ExMLX.slice(t, [0, 0], [1, 3])
    nine = ExMLX.full(9, {:s, 32}, {})
    # [0, 1, 2] with 2 between: [0, 9, 9, 1, 9, 9, 2]; then drop 1 in front, add 1 behind
    padded = ExMLX.pad(row, [{0, 0, 0}, {-1, 1, 2}], nine)
    assert ExMLX.to_list(padded) == [9, 9, 1, 9, 9, 2, 9]
    # both axes of a 2×2 with interior 1: [[0, 9, 1], [9, 9, 9], [3, 9, 4]]
    sq = ExMLX.slice(t, [0, 0], [2, 2])

    assert ExMLX.pad(sq, [{0, 0, 1}, {0, 0, 1}], nine) |> ExMLX.to_list() == [
             0,
             9,
             1,
             9,
             9,
             9,
             3,
             9,
             4
           ]
  end

  test "f64 is refused on the gpu with the device named" do
    unless ExMLX.device_available?(:gpu) do
      # without a GPU the device error comes first; the type check is in ex_mlx_core
      assert_raise ExMLX.Error, ~r/(gpu device is not available|not supported on the gpu)/, fn ->
        ExMLX.full(1.0, {:f, 64}, {1}, device: :gpu)
      end
    end
  end
end
