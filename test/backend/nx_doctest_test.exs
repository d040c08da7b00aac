if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.DoctestCase do
    @moduledoc false
    # Doctests print tensors as Nx.BinaryBackend does: without the backend line.
    use ExUnit.CaseTemplate

    using do
      quote do
        use ExUnit.Case, async: false
      end
    end

    setup_all do
      Application.put_env(:ex_mlx, :add_backend_on_inspect, false)
      on_exit(fn -> Application.delete_env(:ex_mlx, :add_backend_on_inspect) end)
      :ok
    end

    setup do
      Nx.default_backend(ExMLX.Backend)
      :ok
    end
  end

  defmodule ExMLX.Backend.NxDoctestTest do
    @moduledoc """
    Nx's own doctests with ExMLX.Backend as the default backend.

    Every exclusion names its reason; the rounding ones are re-checked
    numerically in ExMLX.Backend.RoundingTest.
    """
    use ExMLX.Backend.DoctestCase

    @rounding [
      # Nx.BinaryBackend uses a rational approximation (error ~3e-9 at 0.1);
      # ExMLX computes erf_inv to full f64 precision, so the digits differ.
      erf_inv: 1,
      # 1 ulp: Nx computes log(1 + x), ExMLX the C library's log1p.
      log1p: 1
    ]

    @unrelated [
      # prints the default backend itself (Nx.BinaryBackend in the doctest)
      default_backend: 1
    ]

    doctest Nx, except: @rounding ++ @unrelated
  end

  defmodule ExMLX.Backend.NxLinAlgDoctestTest do
    @moduledoc "Nx.LinAlg's doctests with ExMLX.Backend as the default backend."
    use ExMLX.Backend.DoctestCase

    @rounding [
      # LAPACK (through MLX) and Nx's own algorithms round differently in f32:
      # the digits differ in the last place or two.
      cholesky: 1,
      determinant: 1,
      solve: 2,
      least_squares: 3,
      pinv: 2,
      matrix_power: 2,
      triangular_solve: 3,
      lu: 1
    ]

    @sign_conventions [
      # Factorisations unique only up to the signs (and, for repeated
      # eigenvalues, the basis) of their vectors: LAPACK's Householder and
      # Jacobi choices differ from Nx's. Checked by reconstruction instead.
      qr: 2,
      eigh: 2,
      svd: 2
    ]

    doctest Nx.LinAlg, except: @rounding ++ @sign_conventions
  end

  defmodule ExMLX.Backend.NxRandomDoctestTest do
    @moduledoc "Nx.Random's doctests (pure Nx on top of the backend's bit operations)."
    use ExMLX.Backend.DoctestCase

    @rounding [
      # normal samples go through erf_inv, which ExMLX computes more
      # precisely than Nx's approximation: the last digit differs.
      normal: 4,
      multivariate_normal: 4
    ]

    doctest Nx.Random, except: @rounding
  end
end
