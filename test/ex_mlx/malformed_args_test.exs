defmodule ExMLX.MalformedArgsTest do
  # Feeds random, mostly wrong arguments to every NIF. Each call must come back
  # as a value or an {:error, {kind, message}} of a documented kind; an
  # exception is a failure, and the VM must live on.
  use ExUnit.Case, async: false
  import ExMLX.TestHelpers, only: [drain_mailbox: 0, error_kinds: 0]

  @calls 30_000
  @seed 20_261_122

  defp nifs do
    ExMLX.Native.__info__(:functions)
    # (panic_for_test panics on purpose; test/reliability/panic_test.exs covers it)
    |> Enum.reject(fn {name, _} ->
      name in [
        :load_nif,
        :load_error,
        :not_loaded_error,
        :nif_path,
        :panic_for_test,
        :hold_worker_for_test,
        :release_worker_for_test
      ]
    end)
  end

  # A pool of argument shapes: wrong types, negative and huge numbers, bad
  # shapes and axes, binaries of odd sizes, and some valid values, so calls
  # get past the first checks and fail deeper.
  defp random_term(tensors, depth \\ 0) do
    case :rand.uniform(if(depth > 1, do: 14, else: 18)) do
      1 ->
        Enum.random([:cpu, :gpu, :tpu, nil, true, false, :sum, :nope, :bool, :argmax])

      2 ->
        Enum.random([
          0,
          1,
          -1,
          3,
          -7,
          2_147_483_648,
          -2_147_483_649,
          Bitwise.bsl(1, 64),
          -Bitwise.bsl(1, 70)
        ])

      3 ->
        Enum.random([0.5, -1.0e308, 1.0e308, 3.0])

      4 ->
        :crypto.strong_rand_bytes(:rand.uniform(17) - 1)

      5 ->
        Enum.random(tensors).ref

      6 ->
        Enum.random([{:f, 32}, {:s, 64}, {:u, 8}, {:f, 8}, {:c, 128}, {:x, 1}, {:f, -1}, :bool])

      7 ->
        Enum.random([
          {},
          {2},
          {2, 3},
          {-1},
          {0, 5},
          {Bitwise.bsl(1, 31)},
          {65_536, 65_536, 65_536},
          {:a}
        ])

      8 ->
        Enum.random([[], [0], [-1], [5], [0, 0], [1, -2], [Bitwise.bsl(1, 40)]])

      9 ->
        make_ref()

      10 ->
        self()

      11 ->
        Enum.random(["", "abc", <<0, 0, 0>>])

      12 ->
        %{a: 1}

      13 ->
        Enum.random([[{1, 2}], [{-1, 0}, {0, -5}], [{Bitwise.bsl(1, 40), 0}]])

      14 ->
        Enum.random(tensors)

      15 ->
        Enum.map(1..:rand.uniform(3), fn _ -> random_term(tensors, depth + 1) end)

      16 ->
        List.to_tuple(Enum.map(1..:rand.uniform(3), fn _ -> random_term(tensors, depth + 1) end))

      17 ->
        Enum.map(1..:rand.uniform(3), fn _ -> Enum.random(tensors).ref end)

      18 ->
        {random_term(tensors, depth + 1), random_term(tensors, depth + 1)}
    end
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

    nifs = nifs()
    assert length(nifs) >= 25

    {outcomes, bad} =
      Enum.reduce(1..@calls, {%{}, []}, fn i, {counts, bad} ->
        {name, arity} = Enum.at(nifs, rem(i, length(nifs)))
        args = args(name, arity, tensors)
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
  defp args(:op, 4, tensors) do
    entry = Enum.random(ExMLX.OpTable.entries())
    name = if :rand.uniform(10) == 1, do: random_term(tensors), else: entry.name

    inputs =
      case :rand.uniform(3) do
        1 -> random_term(tensors)
        _ -> Enum.map(1..:rand.uniform(3), fn _ -> Enum.random(tensors).ref end)
      end

    params =
      case :rand.uniform(3) do
        1 -> random_term(tensors)
        _ -> Enum.map(entry.params, fn _ -> random_term(tensors) end)
      end

    [random_term(tensors), name, inputs, params]
  end

  defp args(_name, arity, tensors), do: for(_ <- 1..arity//1, do: random_term(tensors))

  # The NIF contract for any arguments: a value, or `{:error, {kind, message}}`
  # with a kind ExMLX.Error or ExMLX.Wire documents. An exception (ArgumentError
  # from a badarg, ErlangError from a panic) breaks it.
  defp call(name, args) do
    case apply(ExMLX.Native, name, args) do
      {:error, {kind, message}} = error when is_atom(kind) and is_binary(message) ->
        if kind in error_kinds(), do: {:ok, kind}, else: {:bad, error}

      {:error, other} ->
        {:bad, {:error, other}}

      _value ->
        {:ok, :value}
    end
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
