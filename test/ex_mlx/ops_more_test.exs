defmodule ExMLX.OpsMoreTest do
  # Indexing, sorting, cumulative, FFT, linear algebra and convolution, with
  # expected values worked out by hand (see the comments).
  use ExUnit.Case, async: true

  import ExMLX.TestHelpers

  defp matrix(list, rows, cols, type \\ {:f, 32}),
    do:
      list
      |> f64()
      |> ExMLX.as_type(type)
      |> ExMLX.transfer(device_for(type))
      |> ExMLX.reshape({rows, cols})

  describe "indexing" do
    # t = [[0, 1, 2], [3, 4, 5]]
    setup do: %{t: ExMLX.iota({:s, 32}, {2, 3})}

    test "take along an axis", %{t: t} do
      idx = s32([2, 0])
      assert ExMLX.take(t, idx, 1) |> ExMLX.to_list() == [2, 0, 5, 3]
      assert ExMLX.take(t, idx |> ExMLX.slice([1], [2]), 0) |> ExMLX.to_list() == [0, 1, 2]
    end

    test "contiguous copies a strided view in row-major order", %{t: t} do
      # columns 1..2 of [[0, 1, 2], [3, 4, 5]], and the transpose of that
      columns = ExMLX.slice(t, [0, 1], [2, 3])
      assert columns |> ExMLX.contiguous() |> ExMLX.to_list() == [1, 2, 4, 5]
      assert columns |> ExMLX.transpose() |> ExMLX.contiguous() |> ExMLX.to_list() == [1, 4, 2, 5]
      assert ExMLX.contiguous(t) |> ExMLX.to_list() == [0, 1, 2, 3, 4, 5]
    end

    test "take_along_axis", %{t: t} do
      idx = ExMLX.reshape(s32([1, 1, 0, 2, 2, 0]), {2, 3})
      assert ExMLX.take_along_axis(t, idx, 1) |> ExMLX.to_list() == [1, 1, 0, 5, 5, 3]
    end

    test "gather over all axes and over some", %{t: t} do
      idx = ExMLX.reshape(s32([0, 2, 1, 0, 1, 1]), {3, 2})
      # (0,2) -> 2, (1,0) -> 3, (1,1) -> 4
      assert ExMLX.gather(t, idx) |> ExMLX.to_list() == [2, 3, 4]
      # rows 1 and 0 along axis 0 only: full rows
      rows = ExMLX.reshape(s32([1, 0]), {2, 1})
      g = ExMLX.gather(t, rows, [0])
      assert g.shape == {2, 3}
      assert ExMLX.to_list(g) == [3, 4, 5, 0, 1, 2]
      # columns 2 along axis 1: one column per index row
      cols = ExMLX.reshape(s32([2]), {1, 1})
      assert ExMLX.gather(t, cols, [1]) |> ExMLX.to_list() == [2, 5]
    end

    test "scatter put and add", %{t: t} do
      idx = ExMLX.reshape(s32([0, 0, 1, 2]), {2, 2})
      upd = s32([-1, -2])
      # put -1 at (0,0), -2 at (1,2)
      assert ExMLX.scatter(t, idx, upd) |> ExMLX.to_list() == [-1, 1, 2, 3, 4, -2]
      # add: 0 + -1, 5 + -2
      assert ExMLX.scatter(t, idx, upd, add: true) |> ExMLX.to_list() == [-1, 1, 2, 3, 4, 3]
      # a whole row along axis 0: row 1 becomes [7, 8, 9]
      row = ExMLX.reshape(s32([1]), {1, 1})

      assert ExMLX.scatter(t, row, s32([7, 8, 9]), axes: [0]) |> ExMLX.to_list() == [
               0,
               1,
               2,
               7,
               8,
               9
             ]
    end

    test "float indices are refused", %{t: t} do
      assert_raise ExMLX.Error, "indices: indices must be integers, got {:f, 32}", fn ->
        ExMLX.take(t, f32([0.0]), 0)
      end
    end
  end

  describe "sorting" do
    test "sort and stable argsort in both directions" do
      t = s32([3, 1, 3, 2, 1])
      assert ExMLX.sort(t) |> ExMLX.to_list() == [1, 1, 2, 3, 3]
      assert ExMLX.sort(t, direction: :desc) |> ExMLX.to_list() == [3, 3, 2, 1, 1]
      # ties keep their original order
      assert ExMLX.argsort(t) |> ExMLX.to_list() == [1, 4, 3, 0, 2]
      assert ExMLX.argsort(t, direction: :desc) |> ExMLX.to_list() == [0, 2, 3, 1, 4]
    end

    test "sort along an axis of a matrix" do
      t = ExMLX.reshape(s32([3, 1, 2, 0, 5, 4]), {2, 3})
      assert ExMLX.sort(t, axis: 1) |> ExMLX.to_list() == [1, 2, 3, 0, 4, 5]
      assert ExMLX.sort(t, axis: 0) |> ExMLX.to_list() == [0, 1, 2, 3, 5, 4]
    end

    test "top_k and partition" do
      {values, indices} = ExMLX.top_k(ExMLX.reshape(s32([4, 8, 8, 1, 0, 5]), {2, 3}), 2)
      assert ExMLX.to_list(values) == [8, 8, 5, 1]
      assert ExMLX.to_list(indices) == [1, 2, 2, 0]
      p = ExMLX.partition(s32([9, 4, 7, 1, 3]), 1) |> ExMLX.to_list()
      # the 2nd smallest (3) at position 1, the smallest before it
      assert Enum.at(p, 1) == 3 and Enum.at(p, 0) == 1
      assert Enum.sort(p) == [1, 3, 4, 7, 9]

      assert_raise ExMLX.Error, "k: 4 is not within 0..=3", fn ->
        ExMLX.top_k(s32([1, 2, 3]), 4)
      end
    end
  end

  describe "cumulative" do
    test "sum, product, min, max, forward and reverse" do
      t = s32([2, 5, 1, 3])
      assert ExMLX.cumulative_sum(t) |> ExMLX.to_list() == [2, 7, 8, 11]
      assert ExMLX.cumulative_product(t) |> ExMLX.to_list() == [2, 10, 10, 30]
      assert ExMLX.cumulative_min(t) |> ExMLX.to_list() == [2, 2, 1, 1]
      assert ExMLX.cumulative_max(t) |> ExMLX.to_list() == [2, 5, 5, 5]
      assert ExMLX.cumulative_sum(t, reverse: true) |> ExMLX.to_list() == [11, 9, 4, 3]
      m = ExMLX.iota({:s, 32}, {2, 2})
      assert ExMLX.cumulative_sum(m, axis: 1) |> ExMLX.to_list() == [0, 1, 2, 5]
    end
  end

  describe "fft" do
    test "transforms of simple signals" do
      # fft([1, 0, 0, 0]) = [1, 1, 1, 1]; fft([1, 1, 1, 1]) = [4, 0, 0, 0]
      assert ExMLX.fft(f32([1, 0, 0, 0])) |> ExMLX.to_list() == List.duplicate({1.0, 0.0}, 4)

      assert ExMLX.fft(f32([1, 1, 1, 1])) |> ExMLX.to_list() == [
               {4.0, 0.0},
               {0.0, 0.0},
               {0.0, 0.0},
               {0.0, 0.0}
             ]

      # [0, 1, 0, -1] is sin at one cycle: X[1] = -2i, X[3] = 2i
      x = ExMLX.fft(f32([0, 1, 0, -1])) |> ExMLX.to_list()

      assert Enum.map(x, fn {re, im} -> {Kernel.round(re), Kernel.round(im)} end) == [
               {0, 0},
               {0, -2},
               {0, 0},
               {0, 2}
             ]

      # rfft keeps n/2 + 1 bins; irfft inverts it
      r = ExMLX.rfft(f32([1, 2, 3, 4]))
      assert r.shape == {3}
      assert ExMLX.irfft(r, length: 4) |> ExMLX.to_list() == [1.0, 2.0, 3.0, 4.0]
      # zero-padding to length 4 of [1, 1]: [2, 1 - i, 0, 1 + i]
      assert ExMLX.fft(f32([1, 1]), length: 4) |> ExMLX.to_list() == [
               {2.0, 0.0},
               {1.0, -1.0},
               {0.0, 0.0},
               {1.0, 1.0}
             ]
    end

    test "fft2 and its inverse" do
      m = matrix([1, 2, 3, 4], 2, 2)
      # sum 10; row difference (1+2)-(3+4) = -4; column difference (1+3)-(2+4) = -2; 1-2-3+4 = 0
      assert ExMLX.fft2(m) |> ExMLX.to_list() == [
               {10.0, 0.0},
               {-2.0, 0.0},
               {-4.0, 0.0},
               {0.0, 0.0}
             ]

      back = ExMLX.ifft2(ExMLX.fft2(m)) |> ExMLX.real() |> ExMLX.to_list()
      assert back == [1.0, 2.0, 3.0, 4.0]
    end
  end

  describe "linear algebra" do
    test "tensordot and einsum" do
      a = matrix([1, 2, 3, 4], 2, 2)
      # a · aᵀ = [[5, 11], [11, 25]]
      assert ExMLX.tensordot(a, a, [1], [1]) |> ExMLX.to_list() == [5.0, 11.0, 11.0, 25.0]
      assert ExMLX.einsum("ij,kj->ik", [a, a]) |> ExMLX.to_list() == [5.0, 11.0, 11.0, 25.0]
      ints = ExMLX.as_type(a, {:s, 64})
      assert ExMLX.tensordot(ints, ints, [0, 1], [0, 1]) |> ExMLX.item() == 30
    end

    test "factorisations reproduce their input" do
      # symmetric positive definite: [[4, 2], [2, 3]]
      a = matrix([4, 2, 2, 3], 2, 2, {:f, 64})
      [l] = ExMLX.linalg(:cholesky, a)
      # l = [[2, 0], [1, sqrt(2)]]
      assert_close(ExMLX.to_list(l), [2.0, 0.0, 1.0, :math.sqrt(2)], 1.0e-12, "cholesky")

      [w, _v] = ExMLX.linalg(:eigh, a)
      # eigenvalues of [[4,2],[2,3]]: (7 ± sqrt(17)) / 2
      assert_close(
        ExMLX.to_list(w),
        [(7 - :math.sqrt(17)) / 2, (7 + :math.sqrt(17)) / 2],
        1.0e-12,
        "eigh"
      )

      [q, r] = ExMLX.linalg(:qr, a)
      assert_close(ExMLX.matmul(q, r) |> ExMLX.to_list(), [4.0, 2.0, 2.0, 3.0], 1.0e-12, "q·r")

      [u, s, vt] = ExMLX.linalg(:svd, a)
      us = ExMLX.multiply(u, ExMLX.reshape(s, {1, 2}))

      assert_close(
        ExMLX.matmul(us, vt) |> ExMLX.to_list(),
        [4.0, 2.0, 2.0, 3.0],
        1.0e-12,
        "u·s·vt"
      )

      [det] = ExMLX.linalg(:determinant, a)
      assert_close([ExMLX.item(det)], [8.0], 1.0e-12, "det")

      [inv] = ExMLX.linalg(:inv, a)
      # inverse = [[3, -2], [-2, 4]] / 8
      assert_close(ExMLX.to_list(inv), [0.375, -0.25, -0.25, 0.5], 1.0e-12, "inv")

      [p, l2, u2] = ExMLX.linalg(:lu, a)
      lu = ExMLX.matmul(l2, u2)
      # rows of l·u are the rows of a in the order p gives
      assert_close(
        ExMLX.take(lu, ExMLX.argsort(p), 0) |> ExMLX.to_list(),
        [4.0, 2.0, 2.0, 3.0],
        1.0e-12,
        "lu"
      )
    end

    test "triangular inverse and solves" do
      l = matrix([2, 0, 1, 4], 2, 2)
      [li] = ExMLX.linalg(:tri_inv, l)
      # [[2, 0], [1, 4]]⁻¹ = [[1/2, 0], [-1/8, 1/4]]
      assert ExMLX.to_list(li) == [0.5, 0.0, -0.125, 0.25]
      b = f32([2, 9])
      # 2x = 2 -> x = 1; 1 + 4y = 9 -> y = 2
      assert ExMLX.solve(l, b, triangular: :lower) |> ExMLX.to_list() == [1.0, 2.0]
      assert ExMLX.solve(l, b) |> ExMLX.to_list() == [1.0, 2.0]
    end

    test "non-square and integer inputs are named" do
      assert_raise ExMLX.Error, "tensor: needs square matrices, got shape {2, 3}", fn ->
        ExMLX.linalg(:inv, ExMLX.iota({:f, 32}, {2, 3}))
      end

      assert_raise ExMLX.Error,
                   "tensor: linear algebra needs a floating type, got {:s, 32}",
                   fn ->
                     ExMLX.linalg(:inv, ExMLX.iota({:s, 32}, {2, 2}))
                   end
    end
  end

  describe "convolution" do
    test "1-d with stride, padding and dilation" do
      x = ExMLX.reshape(f32([1, 2, 3, 4, 5]), {1, 5, 1})
      k = ExMLX.reshape(f32([1, -1]), {1, 2, 1})
      # x[i] - x[i+1] = -1 everywhere
      assert ExMLX.conv(x, k) |> ExMLX.to_list() == [-1.0, -1.0, -1.0, -1.0]
      # stride 2: positions 0 and 2
      assert ExMLX.conv(x, k, strides: [2]) |> ExMLX.to_list() == [-1.0, -1.0]
      # padding one zero in front: [0 - 1, 1 - 2, ...]
      assert ExMLX.conv(x, k, padding: [{1, 0}]) |> ExMLX.to_list() == [
               -1.0,
               -1.0,
               -1.0,
               -1.0,
               -1.0
             ]

      # kernel dilation 2: x[i] - x[i+2] = -2
      assert ExMLX.conv(x, k, kernel_dilation: [2]) |> ExMLX.to_list() == [-2.0, -2.0, -2.0]
      # input dilation 2 then one zero on each side: [0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0]
      # minus its shift: [-1, 1, -2, 2, -3, 3, -4, 4, -5, 5]
      assert ExMLX.conv(x, k, input_dilation: [2], padding: [{1, 1}]) |> ExMLX.to_list() ==
               [-1.0, 1.0, -2.0, 2.0, -3.0, 3.0, -4.0, 4.0, -5.0, 5.0]
    end

    test "2-d with two channels" do
      # one 2×2 image, channels [1, 10] everywhere; kernel sums all taps of both channels
      x =
        ExMLX.concatenate(
          [ExMLX.full(1.0, {:f, 32}, {1, 2, 2, 1}), ExMLX.full(10.0, {:f, 32}, {1, 2, 2, 1})],
          3
        )

      k = ExMLX.full(1.0, {:f, 32}, {1, 2, 2, 2})
      assert ExMLX.conv(x, k) |> ExMLX.to_list() == [44.0]
    end
  end

  test "cumulative ops along an axis of no elements give an empty tensor (MLX's scan divided by zero)" do
    for op <- [:cumulative_sum, :cumulative_product, :cumulative_min, :cumulative_max],
        {type, one_element} <- [{{:f, 32}, <<1.0::32-float-little>>}, {{:u, 8}, <<1>>}] do
      empty = ExMLX.iota(type, {0, 3})
      # the type the same op gives for one element
      expected_type = apply(ExMLX, op, [ExMLX.from_binary(one_element, type, {1})]).type

      for axis <- [0, -2, 1] do
        out = apply(ExMLX, op, [empty, [axis: axis, reverse: false]])
        assert {out.shape, out.type, ExMLX.to_binary(out)} == {{0, 3}, expected_type, <<>>}
      end
    end
  end

  test "sort, argsort and top_k of tensors with no elements give empty results (MLX's sort divided by zero)" do
    for {type, one_element} <- [
          {{:f, 32}, <<1.0::32-float-little>>},
          {{:s, 32}, <<1::32-little>>}
        ] do
      index_type = ExMLX.argsort(ExMLX.from_binary(one_element, type, {1})).type

      for shape <- [{0}, {3, 0}, {0, 3}], direction <- [:asc, :desc] do
        empty = ExMLX.from_binary(<<>>, type, shape)
        sorted = ExMLX.sort(empty, direction: direction)
        order = ExMLX.argsort(empty, direction: direction)
        assert {sorted.shape, sorted.type, ExMLX.to_binary(sorted)} == {shape, type, <<>>}
        assert {order.shape, order.type, ExMLX.to_binary(order)} == {shape, index_type, <<>>}
      end

      {values, indices} = ExMLX.top_k(ExMLX.from_binary(<<>>, type, {3, 0}), 0)
      assert {values.shape, indices.shape} == {{3, 0}, {3, 0}}
    end
  end

  test "shifts by counts outside 0..bits shift every bit out, as Nx.BinaryBackend does" do
    import Bitwise

    # x << n and x >> n on unbounded integers, wrapped to `bits` (two's
    # complement for signed types): Nx.BinaryBackend's definition
    wrap = fn v, {kind, bits} ->
      v = v &&& (1 <<< bits) - 1
      if kind == :s and v >= 1 <<< (bits - 1), do: v - (1 <<< bits), else: v
    end

    for {type, values, counts} <- [
          {{:s, 32}, [1, -1, -8, 8, 123_456], [0, 31, 32, 33, 100]},
          {{:u, 8}, [1, 128, 255, 7, 64], [0, 7, 8, 9, 200]},
          {{:s, 8}, [1, -128, -1, 100, -3], [0, 7, 8, 63, 127]},
          {{:u, 64}, [1, 3, 5, 7, 9], [0, 63, 64, 65, 1000]}
        ] do
      {_, bits} = type
      enc = fn l -> for v <- l, into: <<>>, do: <<v::size(bits)-little>> end
      x = ExMLX.from_binary(enc.(values), type, {5})
      n = ExMLX.from_binary(enc.(counts), type, {5})
      pairs = Enum.zip(values, counts)

      assert ExMLX.to_list(ExMLX.left_shift(x, n)) ==
               Enum.map(pairs, fn {v, c} -> wrap.(v <<< c, type) end),
             inspect(type)

      assert ExMLX.to_list(ExMLX.right_shift(x, n)) ==
               Enum.map(pairs, fn {v, c} -> wrap.(v >>> c, type) end),
             inspect(type)
    end
  end

  test "integer remainder of the smallest value has the dividend's sign, as Elixir's rem/2" do
    for bits <- [8, 16, 32, 64] do
      min = -Integer.pow(2, bits - 1)
      max = Integer.pow(2, bits - 1) - 1
      pairs = for a <- [min, min + 1, -7, 7, max], b <- [min, min + 1, -3, 3, 7, max], do: {a, b}
      enc = fn l -> for v <- l, into: <<>>, do: <<v::size(bits)-signed-little>> end
      {as, bs} = Enum.unzip(pairs)
      a = ExMLX.from_binary(enc.(as), {:s, bits}, {length(as)})
      b = ExMLX.from_binary(enc.(bs), {:s, bits}, {length(bs)})
      assert ExMLX.to_list(ExMLX.remainder(a, b)) == Enum.map(pairs, fn {x, y} -> rem(x, y) end)
    end
  end

  test "float remainder keeps the dividend's sign bit, -0.0 included (C's fmod)" do
    bits = fn l -> for v <- l, into: <<>>, do: <<v::32-float-little>> end
    a = ExMLX.from_binary(bits.([-0.0, 0.0, -4.0, 4.0, -5.5]), {:f, 32}, {5})
    b = ExMLX.from_binary(bits.([1.0, -1.0, 2.0, -2.0, 2.0]), {:f, 32}, {5})
    # fmod(-0, 1) = -0, fmod(0, -1) = 0, fmod(-4, 2) = -0, fmod(4, -2) = 0, fmod(-5.5, 2) = -1.5
    assert ExMLX.to_binary(ExMLX.remainder(a, b)) == bits.([-0.0, 0.0, -0.0, 0.0, -1.5])
  end
end
