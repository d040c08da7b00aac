if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.DoctestCase do
    @moduledoc false
    # Doctests print tensors as Nx.BinaryBackend does: without the backend line.
    use ExUnit.CaseTemplate

    # `use ExMLX.Backend.DoctestCase, module: Nx.LinAlg` runs that module's
    # doctests and checks that each exclusion listed for it names one of them.
    using opts do
      module = Keyword.fetch!(opts, :module)

      quote do
        use ExUnit.Case, async: false

        doctest unquote(module)

        test "every exclusion names one of these doctests" do
          for {name, _reason} <- ExMLX.NxDoctestExclusions.for_module(unquote(module)) do
            assert function_exported?(__MODULE__, String.to_atom(name), 1), name
          end
        end
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
    use ExMLX.Backend.DoctestCase, module: Nx
  end

  defmodule ExMLX.Backend.NxLinAlgDoctestTest do
    @moduledoc "Nx.LinAlg's doctests with ExMLX.Backend as the default backend."
    use ExMLX.Backend.DoctestCase, module: Nx.LinAlg
  end

  defmodule ExMLX.Backend.NxRandomDoctestTest do
    @moduledoc "Nx.Random's doctests (pure Nx on top of the backend's bit operations)."
    use ExMLX.Backend.DoctestCase, module: Nx.Random
  end
end
