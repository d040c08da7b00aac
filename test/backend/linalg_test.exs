if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.LinAlgTest do
    @moduledoc """
    Nx.LinAlg on ExMLX.Backend against exact values derived here (closed
    forms in f64, rounded to the result type by Erlang's own float
    encoding), and the conventions ExMLX shares with Nx: QR's Householder
    signs, eigenvalues by decreasing magnitude, eigen- and singular-vector
    signs. It covers the inputs of the Nx doctests excluded in
    ExMLX.NxDoctestExclusions.
    """
    use ExUnit.Case, async: false

    setup do
      Nx.default_backend(ExMLX.Backend)
      :ok
    end

    @sqrt2 :math.sqrt(2)

    # x rounded once to f32 (or f16), as Erlang encodes floats.
    defp f32(x), do: round_to(x, 32)
    defp f16(x), do: round_to(x, 16)

    defp round_to(x, size) do
      <<y::float-size(size)>> = <<x::float-size(size)>>
      y
    end

    defp f32_list(list), do: list |> List.flatten() |> Enum.map(&f32/1)

    defp flat(t), do: t |> Nx.to_flat_list()

    # Every element within `rtol` (relative) of the exact value, or within
    # `rtol` absolutely where that value is zero.
    defp assert_near(t, exact, rtol) do
      got = flat(t)
      exact = List.flatten(exact)
      assert length(got) == length(exact)

      for {g, e} <- Enum.zip(got, exact) do
        assert abs(g - e) <= rtol * max(abs(e), 1.0), "#{inspect(got)} vs #{inspect(exact)}"
      end
    end

    describe "results are the exact values rounded once" do
      test "triangular solves" do
        a = Nx.tensor([[3, 0, 0, 0], [2, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1]])
        # 3x = 4, 2x + y = 2, x + z = 4, x + y + z + w = 2
        x = 4 / 3
        y = 2 - 2 * x
        z = 4 - x
        w = 2 - x - y - z

        assert flat(Nx.LinAlg.triangular_solve(a, Nx.tensor([4, 2, 4, 2]))) ==
                 f32_list([x, y, z, w])

        # the transpose, solved as an upper triangle: aᵀ·v = b
        at = Nx.transpose(a)
        v3 = 2 / 1
        v2 = 4 - v3
        v1 = 2 - v3
        v0 = (4 - 2 * v1 - v2 - v3) / 3
        b = Nx.tensor([4, 2, 4, 2])

        assert flat(Nx.LinAlg.triangular_solve(at, b, lower: false)) ==
                 f32_list([v0, v1, v2, v3])

        # the same through transform_a: :transpose of the lower triangle
        assert flat(Nx.LinAlg.triangular_solve(a, b, transform_a: :transpose)) ==
                 f32_list([v0, v1, v2, v3])

        # and with a vector on the right of a: v·a = b is aᵀ·v = b
        assert flat(Nx.LinAlg.triangular_solve(a, b, left_side: false)) ==
                 f32_list([v0, v1, v2, v3])

        # batched: the same vector twice
        batch = Nx.stack([a, a])

        assert flat(Nx.LinAlg.triangular_solve(batch, Nx.stack([b, b]), left_side: false)) ==
                 f32_list([v0, v1, v2, v3, v0, v1, v2, v3])
      end

      test "a triangular solve in f16 rounds the f64 solution directly to f16" do
        # 3x = 1: x = 1/3, whose nearest f16 is 1365/4096
        a = Nx.tensor([[3.0]], type: :f16)
        x = Nx.LinAlg.triangular_solve(a, Nx.tensor([1.0], type: :f16))
        assert x.type == {:f, 16}
        assert flat(x) == [1365 / 4096]
        assert f16(1 / 3) == 1365 / 4096
      end

      test "qr of a tall matrix" do
        t = Nx.tensor([[3, 2, 1], [0, 1, 1], [0, 0, 1], [0, 0, 1]], type: :f32)
        {q, r} = Nx.LinAlg.qr(t)
        s = 1 / @sqrt2

        assert flat(q) ==
                 f32_list([[1, 0, 0], [0, 1, 0], [0, 0, s], [0, 0, s]])

        assert flat(r) == f32_list([[3, 2, 1], [0, 1, 1], [0, 0, @sqrt2]])
      end

      test "eigh of [[2, 5], [5, 6]]" do
        # λ = 4 ± √29; (2 - λ)·x + 5·y = 0 gives the vector (5, λ - 2)
        root = :math.sqrt(29)

        vector = fn lambda ->
          norm = :math.sqrt(25 + (lambda - 2) ** 2)
          [5 / norm, (lambda - 2) / norm]
        end

        [a0, a1] = vector.(4 + root)
        [b0, b1] = vector.(4 - root)
        {w, v} = Nx.LinAlg.eigh(Nx.tensor([[2, 5], [5, 6]]))
        assert flat(w) == f32_list([4 + root, 4 - root])
        # columns, each with its largest component positive: (a0, a1) and (b0, b1)
        assert flat(v) == f32_list([[a0, b0], [a1, b1]])
        assert b0 > 0 and abs(b0) > abs(b1)
      end

      test "svd of a diagonal tall matrix" do
        {u, s, vt} = Nx.LinAlg.svd(Nx.tensor([[2, 0, 0], [0, 3, 0], [0, 0, -1], [0, 0, 0]]))
        assert flat(s) == [3.0, 2.0, 1.0]
        assert flat(vt) == [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]

        assert flat(u) ==
                 [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0]

        # no -0.0 anywhere
        for t <- [u, vt], <<x::binary-size(4) <- Nx.to_binary(t)>> do
          refute x == <<-0.0::float-32-little>>
        end
      end

      test "cholesky and lu of f64 matrices" do
        # (f64 lives on the CPU: MLX's GPU backends have no float64)
        Nx.default_backend({ExMLX.Backend, device: :cpu})
        l = Nx.LinAlg.cholesky(Nx.tensor([[2.0, 3.0], [3.0, 5.0]], type: :f64))
        assert_near(l, [[@sqrt2, 0], [3 / @sqrt2, 1 / @sqrt2]], 1.0e-15)

        # [[1, 2, 3], [4, 5, 6], [7, 8, 10]]: the first pivot is row 2 (7),
        # leaving rows (0, 6/7, 11/7) and (0, 3/7, 2/7); the second is the
        # first of these, leaving 2/7 - (1/2)·(11/7) = -1/2. So l·u holds
        # rows 2, 0, 1 of a, and a = p·l·u with
        a = Nx.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 10]], type: :f64)
        {p, l, u} = Nx.LinAlg.lu(a)
        assert Nx.to_list(p) == [[0, 1, 0], [0, 0, 1], [1, 0, 0]]
        assert_near(l, [[1, 0, 0], [1 / 7, 1, 0], [4 / 7, 1 / 2, 1]], 1.0e-15)
        assert_near(u, [[7, 8, 10], [0, 6 / 7, 11 / 7], [0, 0, -1 / 2]], 1.0e-15)
      end

      test "solve in f64, and small determinants by their formula" do
        Nx.default_backend({ExMLX.Backend, device: :cpu})
        a = Nx.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 10]], type: :f64)
        # x = (1, 2, 3): b = (14, 32, 53)
        x = Nx.LinAlg.solve(a, Nx.tensor([14, 32, 53], type: :f64))
        assert_near(x, [1, 2, 3], 1.0e-14)

        # 1·4 - 2·3 and the rule of Sarrus: exact in f32
        assert Nx.to_number(Nx.LinAlg.determinant(Nx.tensor([[1, 2], [3, 4]]))) == -2.0
        m = Nx.tensor([[1.0, 2.0, 3.0], [1.0, -2.0, 3.0], [7.0, 8.0, 9.0]])
        assert Nx.to_number(Nx.LinAlg.determinant(m)) == 48.0
        # a singular matrix has determinant 0.0, not -0.0, and no solution
        singular = Nx.tensor([[1.0, 0.0], [3.0, 0.0]])
        assert Nx.to_binary(Nx.LinAlg.determinant(singular)) == <<0.0::float-32-little>>

        assert_raise ArgumentError, "a: can't solve for singular matrix", fn ->
          Nx.LinAlg.solve(singular, Nx.tensor([1.0, 2.0]))
        end
      end
    end

    describe "f32 results within a few ulp of the exact values" do
      # Where ExMLX's f32 path is LAPACK's (Cholesky, LU, solve, determinant)
      # or goes through Nx's own f32 composition (pinv, least_squares,
      # matrix_power): 1.0e-6 relative is about 8 ulp; the doctests' own
      # values are up to 1.7e-5 away.
      @f32_rtol 1.0e-6

      test "cholesky, solve, determinant" do
        l = Nx.LinAlg.cholesky(Nx.tensor([[2.0, 3.0], [3.0, 5.0]]))
        assert_near(l, [[@sqrt2, 0], [3 / @sqrt2, 1 / @sqrt2]], @f32_rtol)

        a = Nx.tensor([[[14, 10], [9, 9]], [[4, 11], [2, 3]]])
        b = Nx.tensor([[[2, 4], [3, 2]], [[1, 5], [-3, -1]]])
        # [[14, 10], [9, 9]]⁻¹ = [[9, -10], [-9, 14]] / 36;
        # [[4, 11], [2, 3]]⁻¹ = [[3, -11], [-2, 4]] / -10
        x1 = [
          [(9 * 2 - 10 * 3) / 36, (9 * 4 - 10 * 2) / 36],
          [(-9 * 2 + 14 * 3) / 36, (-9 * 4 + 14 * 2) / 36]
        ]

        x2 = [
          [(3 * 1 - 11 * -3) / -10, (3 * 5 - 11 * -1) / -10],
          [(-2 * 1 + 4 * -3) / -10, (-2 * 5 + 4 * -1) / -10]
        ]

        assert_near(Nx.LinAlg.solve(a, b), [x1, x2], @f32_rtol)

        dets =
          Nx.LinAlg.determinant(
            Nx.tensor([
              [[2, 4, 6, 7], [5, 1, 8, 8], [1, 7, 3, 1], [3, 9, 2, 4]],
              [[2, 5, 1, 3], [4, 1, 7, 9], [6, 8, 3, 2], [7, 8, 1, 4]]
            ])
          )

        # both 630, by cofactor expansion (see the Rust tests for f64)
        assert_near(dets, [630, 630], @f32_rtol)
      end

      test "pinv, least_squares and matrix_power" do
        # [[1, 1], [3, 4]] has determinant 1: its inverse is [[4, -1], [-3, 1]]
        assert_near(Nx.LinAlg.pinv(Nx.tensor([[1, 1], [3, 4]])), [[4, -1], [-3, 1]], @f32_rtol)

        assert_near(
          Nx.LinAlg.least_squares(Nx.tensor([[1, 2], [2, 3]]), Nx.tensor([1, 2])),
          [1, 0],
          @f32_rtol
        )

        # the normal equations of the line fit: [[14, 6], [6, 4]]·x = [8.3, 2.2]
        slope = (4 * 8.3 - 6 * 2.2) / (14 * 4 - 36)
        intercept = (14 * 2.2 - 6 * 8.3) / (14 * 4 - 36)

        assert_near(
          Nx.LinAlg.least_squares(
            Nx.tensor([[0, 1], [1, 1], [2, 1], [3, 1]]),
            Nx.tensor([-1, 0.2, 0.9, 2.1])
          ),
          [slope, intercept],
          @f32_rtol
        )

        # minimum-norm solution of [[1, 2, 3], [4, 5, 6]]·x = [1, 2]:
        # x = aᵀ·(a·aᵀ)⁻¹·b, a·aᵀ = [[14, 32], [32, 77]] (determinant 54)
        y = [(77 * 1 - 32 * 2) / 54, (-32 * 1 + 14 * 2) / 54]
        [y0, y1] = y
        x = [y0 + 4 * y1, 2 * y0 + 5 * y1, 3 * y0 + 6 * y1]

        assert_near(
          Nx.LinAlg.least_squares(Nx.tensor([[1, 2, 3], [4, 5, 6]]), Nx.tensor([1, 2])),
          x,
          @f32_rtol
        )

        # [[4, 5], [6, 7]]⁻¹ = [[-3.5, 2.5], [3, -2]]; [[0, 1], [2, 3]]⁻¹ = [[-1.5, 0.5], [1, 0]]
        cube = fn [[a, b], [c, d]] ->
          sq = [[a * a + b * c, a * b + b * d], [c * a + d * c, c * b + d * d]]
          [[e, f], [g, h]] = sq
          [[e * a + f * c, e * b + f * d], [g * a + h * c, g * b + h * d]]
        end

        assert_near(
          Nx.LinAlg.matrix_power(Nx.iota({2, 2, 2}), -3),
          [cube.([[-1.5, 0.5], [1, 0]]), cube.([[-3.5, 2.5], [3, -2]])],
          @f32_rtol
        )
      end

      test "eigh with a double eigenvalue: an orthonormal eigenbasis" do
        a = Nx.tensor([[0, 1, 2], [1, 0, 2], [2, 2, 3]])
        {w, v} = Nx.LinAlg.eigh(a)
        # eigenvalues 5, -1, -1 (trace 3, determinant 5); 5's vector is (1, 1, 2)/√6
        assert_near(w, [5, -1, -1], @f32_rtol)
        s6 = :math.sqrt(6)
        assert_near(v[[.., 0]], [1 / s6, 1 / s6, 2 / s6], @f32_rtol)
        assert_near(Nx.dot(a, v), Nx.multiply(v, w) |> Nx.to_list(), 4 * @f32_rtol)
        assert_near(Nx.dot(Nx.transpose(v), v), Nx.to_list(Nx.eye(3)), 4 * @f32_rtol)
      end
    end

    describe "Nx's conventions" do
      test "qr: columns with nothing below the diagonal keep their sign" do
        # upper triangular: no reflection at all, q = I and r = a
        a = Nx.tensor([[-3, 2, 1], [0, 1, 1], [0, 0, -1]])
        {q, r} = Nx.LinAlg.qr(a)
        assert Nx.to_list(q) == Nx.to_list(Nx.eye(3, type: :f32))
        assert Nx.to_list(r) == Nx.to_list(Nx.as_type(a, :f32))

        # [[0, 1], [3, 2]]: column 0 is reflected onto (3, 0) by the reflection
        # [[0, 1], [1, 0]]; the last column of a square matrix is not
        # reflected, so r[1][1] = 1 keeps its sign
        {q, r} = Nx.LinAlg.qr(Nx.tensor([[0, 1], [3, 2]]))
        assert Nx.to_list(q) == [[0.0, 1.0], [1.0, 0.0]]
        assert Nx.to_list(r) == [[3.0, 2.0], [0.0, 1.0]]
      end

      test "qr agrees with Nx.BinaryBackend's, signs included" do
        # Nx's own Householder QR (on Nx.BinaryBackend) of full-rank matrices,
        # square, tall (reduced and complete) and wide.
        inputs = [
          {Nx.tensor([[4.0, 1.0, 2.0], [1.0, -5.0, 3.0], [2.0, 3.0, 6.0]]), :reduced},
          {Nx.tensor([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0], [-7.0, 9.0]]), :reduced},
          {Nx.tensor([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0], [-7.0, 9.0]]), :complete},
          {Nx.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]]), :reduced}
        ]

        for {t, mode} <- inputs do
          {q, r} = Nx.LinAlg.qr(Nx.backend_copy(t, ExMLX.Backend), mode: mode)

          {bq, br} =
            Nx.with_default_backend(Nx.BinaryBackend, fn -> Nx.LinAlg.qr(t, mode: mode) end)

          assert_near(q, Nx.to_list(bq), 1.0e-5)
          assert_near(r, Nx.to_list(br), 1.0e-5)
        end
      end

      test "eigh: eigenvalues by decreasing magnitude, as Nx.BinaryBackend orders them" do
        # eigenvalues -5 and 1 (vectors (1, -1)/√2 and (1, 1)/√2)
        a = Nx.tensor([[-2.0, 3.0], [3.0, -2.0]])
        {w, v} = Nx.LinAlg.eigh(a)
        assert flat(w) == [-5.0, 1.0]
        s = f32(1 / @sqrt2)
        # largest components tie: the first one is made positive
        assert flat(v) == [s, s, -s, s]

        {bw, _} = Nx.with_default_backend(Nx.BinaryBackend, fn -> Nx.LinAlg.eigh(a) end)
        assert_near(w, Nx.to_list(bw), 1.0e-5)
      end

      test "svd: the right vectors of a tall matrix, the left of a wide one, have their largest component positive" do
        t = Nx.tensor([[1.0, -2.0], [3.0, 4.0], [-5.0, 6.0]])

        for {m, side} <- [{t, :right}, {Nx.transpose(t), :left}] do
          {u, s, vt} = Nx.LinAlg.svd(m, full_matrices?: false)
          assert_near(u |> Nx.multiply(s) |> Nx.dot(vt), Nx.to_list(m), 1.0e-5)

          vectors =
            case side do
              :right -> Nx.to_list(vt)
              :left -> u |> Nx.transpose() |> Nx.to_list()
            end

          for vector <- vectors do
            assert Enum.max_by(vector, &abs/1) > 0, inspect(vectors)
          end
        end
      end
    end
  end

  defmodule ExMLX.Backend.StridedProductTest do
    @moduledoc """
    Products whose operands are strided views, against sums of products
    computed here in f64: attention at a decoding step (one query row per
    head against the transposed heads of a key/value cache, as Bumblebee's
    `Nx.dot` with batch axes has them), the same with several query rows,
    a contraction over two axes, and one row times a block of columns of
    a wider matrix (a fused query/key/value weight split in three). Eager
    and under ExMLX.Compiler.
    """
    use ExUnit.Case, async: false

    @len 48
    @heads 4
    @dim 64

    setup do
      Nx.default_backend(ExMLX.Backend)
      :ok
    end

    # n values in [-1, 1), the same on every run
    defp values(n, seed), do: for(i <- 0..(n - 1), do: :math.sin(i * 0.37 + seed))

    defp f32_tensor(list, shape), do: list |> Nx.tensor(type: :f32) |> Nx.reshape(shape)

    defp assert_close(tensor, expected) do
      got = Nx.to_flat_list(tensor)
      assert length(got) == length(expected)

      for {g, e} <- Enum.zip(got, expected) do
        assert abs(g - e) <= 1.0e-5 * max(abs(e), 1.0), "#{g} against #{e}"
      end
    end

    # attention scores and weighted values as Bumblebee computes them:
    # [1, rows, heads, dim] queries, a [1, len, heads, dim] cache
    defp scores(query, cache) do
      q = Nx.transpose(query, axes: [0, 2, 1, 3])
      k = Nx.transpose(cache, axes: [0, 2, 1, 3])
      Nx.dot(q, [3], [0, 1], k, [3], [0, 1])
    end

    defp weighted(weights, cache) do
      v = Nx.transpose(cache, axes: [0, 2, 1, 3])
      Nx.dot(weights, [3], [0, 1], v, [2], [0, 1])
    end

    for rows <- [1, 3] do
      test "attention over a cache's transposed heads, #{rows} query row(s)" do
        rows = unquote(rows)
        cache_list = values(@len * @heads * @dim, 1.0)
        query_list = values(rows * @heads * @dim, 2.0)
        weights_list = values(@heads * rows * @len, 3.0)
        cache_at = List.to_tuple(cache_list)
        query_at = List.to_tuple(query_list)
        weights_at = List.to_tuple(weights_list)
        c = fn s, h, d -> elem(cache_at, (s * @heads + h) * @dim + d) end

        # scores[h][r][s] = Σ_d query[r][h][d] · cache[s][h][d]
        expected_scores =
          for h <- 0..(@heads - 1), r <- 0..(rows - 1), s <- 0..(@len - 1) do
            Enum.sum(
              for d <- 0..(@dim - 1),
                  do: elem(query_at, (r * @heads + h) * @dim + d) * c.(s, h, d)
            )
          end

        # out[h][r][d] = Σ_s weights[h][r][s] · cache[s][h][d]
        expected_out =
          for h <- 0..(@heads - 1), r <- 0..(rows - 1), d <- 0..(@dim - 1) do
            Enum.sum(
              for s <- 0..(@len - 1),
                  do: elem(weights_at, (h * rows + r) * @len + s) * c.(s, h, d)
            )
          end

        cache = f32_tensor(cache_list, {1, @len, @heads, @dim})
        query = f32_tensor(query_list, {1, rows, @heads, @dim})
        weights = f32_tensor(weights_list, {1, @heads, rows, @len})
        jit_scores = Nx.Defn.jit(&scores/2, compiler: ExMLX.Compiler)
        jit_weighted = Nx.Defn.jit(&weighted/2, compiler: ExMLX.Compiler)

        for {s, out} <- [
              {scores(query, cache), weighted(weights, cache)},
              {jit_scores.(query, cache), jit_weighted.(weights, cache)}
            ] do
          assert s.shape == {1, @heads, rows, @len}
          assert out.shape == {1, @heads, rows, @dim}
          assert_close(s, expected_scores)
          assert_close(out, expected_out)
        end
      end
    end

    test "a batched contraction over two axes of transposed views" do
      # a: [2, 3, 4, 5] contracted on axes 2 and 3 with b: [2, 5, 4, 6] on 2 and 1
      a_list = values(2 * 3 * 4 * 5, 4.0)
      b_list = values(2 * 5 * 4 * 6, 5.0)
      a_at = List.to_tuple(a_list)
      b_at = List.to_tuple(b_list)

      expected =
        for n <- 0..1, i <- 0..2, j <- 0..5 do
          Enum.sum(
            for p <- 0..3,
                q <- 0..4,
                do:
                  elem(a_at, ((n * 3 + i) * 4 + p) * 5 + q) *
                    elem(b_at, ((n * 5 + q) * 4 + p) * 6 + j)
          )
        end

      a = f32_tensor(a_list, {2, 3, 4, 5})
      b = f32_tensor(b_list, {2, 5, 4, 6})
      product = Nx.dot(a, [2, 3], [0], b, [2, 1], [0])
      assert product.shape == {2, 3, 6}
      assert_close(product, expected)
    end

    test "one row times a block of columns of a wider matrix, and its transpose" do
      {k, wide, n} = {256, 768, 256}
      w_list = values(k * wide, 6.0)
      x_list = values(k, 7.0)
      w_at = List.to_tuple(w_list)
      x_at = List.to_tuple(x_list)
      block = fn i, j -> elem(w_at, i * wide + n + j) end

      expected =
        for j <- 0..(n - 1), do: Enum.sum(for i <- 0..(k - 1), do: elem(x_at, i) * block.(i, j))

      w = f32_tensor(w_list, {k, wide})
      x = f32_tensor(x_list, {1, k})
      middle = Nx.slice_along_axis(w, n, n, axis: 1)

      assert_close(Nx.dot(x, middle), expected)
      # blockᵀ · column: the same sums
      assert_close(Nx.dot(Nx.transpose(middle), Nx.reshape(x, {k, 1})), expected)

      jit =
        Nx.Defn.jit(fn w, x -> Nx.dot(x, Nx.slice_along_axis(w, n, n, axis: 1)) end,
          compiler: ExMLX.Compiler
        )

      assert_close(jit.(w, x), expected)
    end
  end
end
