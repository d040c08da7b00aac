if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.NxDoctestTest do
    @moduledoc """
    Nx's own doctests with ExMLX.Backend as the default backend.

    Every exclusion names its reason; the rounding ones are re-checked
    numerically in ExMLX.Backend.RoundingTest.
    """
    use ExUnit.Case, async: false

    setup_all do
      Application.put_env(:ex_mlx, :add_backend_on_inspect, false)
      on_exit(fn -> Application.delete_env(:ex_mlx, :add_backend_on_inspect) end)
      :ok
    end

    setup do
      Nx.default_backend(ExMLX.Backend)
      :ok
    end

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
    use ExUnit.Case, async: false

    setup_all do
      Application.put_env(:ex_mlx, :add_backend_on_inspect, false)
      on_exit(fn -> Application.delete_env(:ex_mlx, :add_backend_on_inspect) end)
      :ok
    end

    setup do
      Nx.default_backend(ExMLX.Backend)
      :ok
    end

    doctest Nx.LinAlg
  end

  defmodule ExMLX.Backend.NxRandomDoctestTest do
    @moduledoc "Nx.Random's doctests (pure Nx on top of the backend's bit operations)."
    use ExUnit.Case, async: false

    setup_all do
      Application.put_env(:ex_mlx, :add_backend_on_inspect, false)
      on_exit(fn -> Application.delete_env(:ex_mlx, :add_backend_on_inspect) end)
      :ok
    end

    setup do
      Nx.default_backend(ExMLX.Backend)
      :ok
    end

    doctest Nx.Random
  end
end
