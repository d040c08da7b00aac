if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.DoctestCase do
    @moduledoc false
    # Doctests print tensors as Nx.BinaryBackend does: without the backend line.
    use ExUnit.CaseTemplate

    # `use ExMLX.Backend.DoctestCase, module: Nx.LinAlg` runs that module's
    # doctests and checks that each exclusion listed for it names one of them;
    # `compiler: ExMLX.Compiler` runs them with that default defn compiler
    # (Nx's functions written in defn, such as its linear algebra and
    # Nx.Random, then run as compiled programs).
    using opts do
      module = Keyword.fetch!(opts, :module)
      compiler = Keyword.get(opts, :compiler)

      quote do
        use ExUnit.Case, async: false
        @moduletag compiler: unquote(compiler)

        doctest unquote(module)

        test "every exclusion names one of these doctests" do
          for {name, _reason} <- ExMLX.NxDoctestExclusions.for_module(unquote(module), :all) do
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

    setup context do
      Nx.default_backend(ExMLX.Backend)
      if compiler = context[:compiler], do: Nx.Defn.default_options(compiler: compiler)
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

  defmodule ExMLX.Compiler.NxDoctestTest do
    @moduledoc "Nx's doctests with ExMLX.Compiler as the default defn compiler."
    use ExMLX.Backend.DoctestCase, module: Nx, compiler: ExMLX.Compiler
  end

  defmodule ExMLX.Compiler.NxLinAlgDoctestTest do
    @moduledoc "Nx.LinAlg's doctests (defn with while loops) through ExMLX.Compiler."
    use ExMLX.Backend.DoctestCase, module: Nx.LinAlg, compiler: ExMLX.Compiler
  end

  defmodule ExMLX.Compiler.NxRandomDoctestTest do
    @moduledoc "Nx.Random's doctests (threefry's while loops) through ExMLX.Compiler."
    use ExMLX.Backend.DoctestCase, module: Nx.Random, compiler: ExMLX.Compiler
  end
end
