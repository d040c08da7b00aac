defmodule ExMLX.Fuzz do
  @moduledoc false
  # Random, mostly wrong arguments for the fuzz tests
  # (test/ex_mlx/malformed_args_test.exs feeds them to every NIF,
  # test/reliability/bad_input_test.exs to every public function): wrong
  # types, negative and huge numbers, bad shapes and axes, binaries of odd
  # sizes, and some valid values, so calls get past the first checks and
  # fail deeper. `pool` holds the valid values: `:tensors` (tensors or native
  # references), `:frames`, `:nx`, `:path`, `:bad_file`.

  import Bitwise

  def pick(list), do: Enum.at(list, :rand.uniform(length(list)) - 1)

  def random_term(pool, depth \\ 0) do
    case :rand.uniform(if(depth > 1, do: 15, else: 19)) do
      1 ->
        pick([:cpu, :gpu, :tpu, nil, true, false, :sum, :nope, :bool, :nx, :mlx, :infinity])

      2 ->
        pick([0, 1, -1, 2, 3, -7, 1 <<< 31, -(1 <<< 31) - 1, 1 <<< 64, -(1 <<< 70), 65_537])

      3 ->
        pick([0.5, -1.0e308, 1.0e308, 3.0, -0.0])

      4 ->
        :rand.bytes(:rand.uniform(33) - 1)

      5 ->
        pick(pool.tensors)

      6 ->
        pick([
          {:f, 32},
          {:s, 64},
          {:u, 8},
          {:f, 8},
          {:c, 128},
          {:x, 1},
          {:f, -1},
          :bool,
          {:bf, 16}
        ])

      7 ->
        pick([
          {},
          {2},
          {2, 3},
          {3, 2},
          {-1},
          {0, 5},
          {1 <<< 31},
          {65_536, 65_536, 65_536},
          {:a},
          List.to_tuple(List.duplicate(1, 40))
        ])

      8 ->
        pick([[], [0], [-1], [5], [0, 0], [1, -2], [1 <<< 40], [0, 1, 2, 3, 4, 5]])

      9 ->
        pick(pool.frames)

      10 ->
        pick([make_ref(), self(), fn -> :ok end, fn _ -> :ok end, %{a: 1}, ~c"abc"])

      11 ->
        random_options(pool, depth)

      12 ->
        pick(["", "abc", <<0, 0, 0>>, pool.path, pool.bad_file])

      13 ->
        pick([[{1, 2}], [{-1, 0}, {0, -5}], [{1 <<< 40, 0}], [{0, 0, 1}], [{1, 1, -1}]])

      14 ->
        %{"a" => pick(pool.tensors), "b" => random_term(pool, depth + 1)}

      15 ->
        pick(pool.nx)

      16 ->
        Enum.map(1..:rand.uniform(3), fn _ -> random_term(pool, depth + 1) end)

      17 ->
        List.to_tuple(Enum.map(1..:rand.uniform(3), fn _ -> random_term(pool, depth + 1) end))

      18 ->
        Enum.map(1..:rand.uniform(3), fn _ -> pick(pool.tensors) end)

      19 ->
        {random_term(pool, depth + 1), random_term(pool, depth + 1)}
    end
  end

  @option_keys [:device, :axes, :axis, :type, :keep_axes, :as, :names, :metadata, :reverse] ++
                 [:stable, :direction, :strides, :padding, :k, :mode, :tie_break, :label, :n, :s]

  def random_options(pool, depth) do
    for _ <- 1..:rand.uniform(3) do
      {pick(@option_keys), random_term(pool, depth + 1)}
    end
  end

  @doc """
  What a call returned, against the contract every NIF and public function
  keeps: `{:ok, :value}`, `{:ok, kind}` for `{:error, {kind, message}}` of a
  documented kind, `{:bad, returned}` for anything else.
  """
  def classify_return({:error, {kind, message}} = error)
      when is_atom(kind) and is_binary(message),
      do: if(kind in ExMLX.TestHelpers.error_kinds(), do: {:ok, kind}, else: {:bad, error})

  def classify_return({:error, _} = error), do: {:bad, error}
  def classify_return(_value), do: {:ok, :value}
end
