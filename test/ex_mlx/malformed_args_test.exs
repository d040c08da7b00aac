defmodule ExMLX.MalformedArgsTest do
  # Feeds random, mostly wrong arguments to every NIF. Each call must come back
  # as a value or an {:error, {kind, message}} of a documented kind; an
  # exception is a failure, and the VM must live on.
  use ExUnit.Case, async: false
  import ExMLX.TestHelpers, only: [drain_mailbox: 0]
  import ExMLX.Fuzz, only: [classify_return: 1, random_term: 1]

  @calls 30_000
  @seed 20_261_122

  defp nifs do
    ExMLX.Native.__info__(:functions)
    # (panic_for_test panics on purpose; test/reliability/panic_test.exs
    # covers it; the other hooks change what later tests see)
    |> Enum.reject(fn {name, _} ->
      name in [
        :load_nif,
        :load_error,
        :not_loaded_error,
        :nif_path,
        :panic_for_test,
        :hold_worker_for_test,
        :release_worker_for_test,
        :set_callers_run_for_test,
        :runs_on_caller_for_test
      ]
    end)
  end

  # The valid values ExMLX.Fuzz mixes into its random arguments: native
  # references (what NIFs take) and the tensor structs around them.
  defp pool(tensors) do
    refs = Enum.map(tensors, & &1.ref)
    frame = ExMLX.Wire.encode(hd(tensors))
    %{tensors: refs ++ tensors, refs: refs, frames: [frame], nx: [nil], path: "", bad_file: ""}
  end

  test "#{@calls} calls with random arguments to every NIF leave the VM alive" do
    :rand.seed(:exsss, {@seed, @seed, @seed})

    tensors = [
      ExMLX.iota({:f, 32}, {2, 3}),
      ExMLX.iota({:s, 64}, {4}),
      ExMLX.full(1, {:u, 8}, {}),
      ExMLX.full(1, :bool, {3}),
      ExMLX.from_binary(<<>>, {:f, 16}, {0, 2}),
      ExMLX.full({1.0, 2.0}, {:c, 64}, {2, 1})
    ]

    # (stream_new with a valid device makes a stream, a thread for the life
    # of the VM, up to a cap other tests rely on: test/ex_mlx/stream_test.exs
    # checks its arguments, and the test below the atom case)
    nifs = Enum.reject(nifs(), &match?({:stream_new, _}, &1))
    pool = pool(tensors)
    assert length(nifs) >= 25

    {outcomes, bad} =
      Enum.reduce(1..@calls, {%{}, []}, fn i, {counts, bad} ->
        {name, arity} = Enum.at(nifs, rem(i, length(nifs)))
        args = args(name, arity, pool)
        if rem(i, 500) == 0, do: drain_mailbox()

        case call(name, args) do
          {:ok, outcome} -> {Map.update(counts, outcome, 1, &(&1 + 1)), bad}
          {:bad, what} -> {counts, [{name, args, what} | bad]}
        end
      end)

    # Let queued work finish and check the workers still answer correctly.
    Process.sleep(50)
    drain_mailbox()
    assert ExMLX.iota({:s, 32}, {4}) |> ExMLX.sum() |> ExMLX.item() == 6

    assert bad == [],
           "#{length(bad)} calls ended outside the NIF contract, e.g.:\n" <>
             Enum.map_join(Enum.take(Enum.reverse(bad), 5), "\n", &inspect(&1, limit: 8))

    IO.puts("\n  malformed-argument calls: #{inspect(outcomes)}")
  end

  # Arguments for a call. The op NIF takes the name of an op of the table:
  # mostly a real one (so calls reach the input and parameter checks), with
  # inputs and parameters random, the parameters often as many as the op
  # takes.
  defp args(:op, 4, pool) do
    entry = Enum.random(ExMLX.OpTable.entries())
    name = if :rand.uniform(10) == 1, do: random_term(pool), else: entry.name

    inputs =
      case :rand.uniform(3) do
        1 -> random_term(pool)
        _ -> Enum.map(1..:rand.uniform(3), fn _ -> Enum.random(pool.refs) end)
      end

    params =
      case :rand.uniform(3) do
        1 -> random_term(pool)
        _ -> Enum.map(entry.params, fn _ -> random_term(pool) end)
      end

    [random_term(pool), name, inputs, params]
  end

  defp args(_name, arity, pool), do: for(_ <- 1..arity//1, do: random_term(pool))

  # The NIF contract for any arguments: a value, or `{:error, {kind, message}}`
  # with a kind ExMLX.Error or ExMLX.Wire documents. An exception (ArgumentError
  # from a badarg, ErlangError from a panic) breaks it.
  defp call(name, args) do
    ExMLX.Native |> apply(name, args) |> classify_return()
  rescue
    e -> {:bad, e}
  end

  test "every NIF refuses an atom in place of each argument, naming the argument" do
    # A term of the wrong kind in every position (a tuple is never a tag, a
    # tensor, a type, an atom option or an integer, and its element is not a
    # dimension): the first argument a NIF decodes is refused with an
    # :argument error that names it and shows the term.
    for {name, arity} <- nifs(), arity > 0 do
      args = List.duplicate({:not_an_argument}, arity)

      assert {:error, {:argument, message}} = apply(ExMLX.Native, name, args),
             "#{name}/#{arity}"

      assert message =~ ~r/^[a-z_]+: /, "#{name}/#{arity}: #{message}"
      assert message =~ ":not_an_argument", "#{name}/#{arity}: #{message}"
    end
  end
end
