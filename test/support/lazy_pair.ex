if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Test.LazyPair do
    @moduledoc false
    # A container of two tensors given lazily (Nx.LazyContainer): calling
    # either one's function sends `{:loaded, field}` to `notify`, so a test
    # sees which ones a compiler asked for.
    defstruct [:used, :unused, :notify]
  end

  defimpl Nx.LazyContainer, for: ExMLX.Test.LazyPair do
    def traverse(%{used: used, unused: unused, notify: notify}, acc, fun) do
      load = fn field, tensor ->
        fn ->
          send(notify, {:loaded, field})
          tensor
        end
      end

      {used, acc} = fun.(Nx.to_template(used), load.(:used, used), acc)
      {unused, acc} = fun.(Nx.to_template(unused), load.(:unused, unused), acc)
      {{used, unused}, acc}
    end
  end
end
