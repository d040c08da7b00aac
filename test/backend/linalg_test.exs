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
end
