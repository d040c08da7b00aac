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

    Every doctest runs but those listed, with their reasons, in
    ExMLX.NxDoctestExclusions (excluded by name in test_helper.exs).
    """
    use ExMLX.Backend.DoctestCase

    doctest Nx

    test "every exclusion names one of these doctests" do
      for {name, _reason} <- ExMLX.NxDoctestExclusions.for_module(Nx) do
        assert function_exported?(__MODULE__, String.to_atom(name), 1), name
      end
    end
  end

  defmodule ExMLX.Backend.NxLinAlgDoctestTest do
    @moduledoc "Nx.LinAlg's doctests with ExMLX.Backend as the default backend."
    use ExMLX.Backend.DoctestCase

    doctest Nx.LinAlg

    test "every exclusion names one of these doctests" do
      for {name, _reason} <- ExMLX.NxDoctestExclusions.for_module(Nx.LinAlg) do
        assert function_exported?(__MODULE__, String.to_atom(name), 1), name
      end
    end
  end

  defmodule ExMLX.Backend.NxRandomDoctestTest do
    @moduledoc "Nx.Random's doctests (pure Nx on top of the backend's bit operations)."
    use ExMLX.Backend.DoctestCase

    doctest Nx.Random

    test "every exclusion names one of these doctests" do
      for {name, _reason} <- ExMLX.NxDoctestExclusions.for_module(Nx.Random) do
        assert function_exported?(__MODULE__, String.to_atom(name), 1), name
      end
    end
  end
end
