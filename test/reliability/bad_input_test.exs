defmodule ExMLX.Reliability.BadInputTest do
  # Calls every public function of ExMLX's modules with random, mostly wrong
  # arguments from a seeded generator: wrong types, huge or negative dims,
  # axes out of range, mismatched shapes and types, binaries of the wrong
  # size, malformed wire frames and bundle files. Every call must return a
  # value or a documented error tuple, or raise ExMLX.Error of a documented
  # kind or an ArgumentError that says what was wrong; any other exception
  # (FunctionClauseError, MatchError, a NIF's bare badarg, ...) is a failure.
  # The VM lives on.
  use ExUnit.Case, async: false
  @moduletag :reliability
  @moduletag timeout: 180_000

  import Bitwise
  import ExMLX.TestHelpers, only: [drain_mailbox: 0, error_kinds: 0]

  @calls 100_000
  @seed 20_261_123
  # Bounds what an accidentally valid call may allocate.
  @memory_limit 512 * 1024 * 1024

  # Functions left out, and why:
  #   start_monitor/stop_monitor - start and stop supervised processes; the
  #     memory tests cover their argument checks.
  @skip [{ExMLX.Memory, :start_monitor}, {ExMLX.Memory, :stop_monitor}]

  defp modules do
    # (ExMLX.Telemetry's functions are internal: @doc false)
    base = [ExMLX, ExMLX.FFT, ExMLX.Wire, ExMLX.Memory, ExMLX.Tensor]
    if Code.ensure_loaded?(ExMLX.Backend), do: base ++ [ExMLX.Backend], else: base
  end

  defp functions do
    for module <- modules(),
        {name, arity} <- module.__info__(:functions),
        arity > 0,
        documented?(module, name, arity),
        {module, name} not in @skip,
        not String.starts_with?(Atom.to_string(name), "__") do
      {module, name, arity}
    end
  end

  # Public API: functions with docs (`@doc false` ones are internal).
  defp documented?(module, name, arity) do
    {:docs_v1, _, _, _, _, _, docs} = Code.fetch_docs(module)

    Enum.any?(docs, fn
      {{:function, ^name, a}, _, _, doc, _} when doc != :hidden ->
        # a function with defaults is listed once, at its highest arity
        arity <= a

      _ ->
        false
    end)
  end

  # -- the generator (ExMLX.Fuzz) --------------------------------------------

  import ExMLX.Fuzz, only: [classify_return: 1, pick: 1, random_term: 1, random_options: 2]

  # Arguments that name files stay inside the test's own directory.
  defp random_args(pool, ExMLX.Wire, name, arity)
       when name in [:write_bundle, :read_bundle, :read_bundle_header] do
    path = pick([pool.path, pool.bad_file, pool.missing, pool.dir, pool.truncated])
    [path | for(_ <- 2..arity//1, do: random_term(pool))]
  end

  # Tensors are put where tensors usually go (first) more often, so calls
  # get past the first clause and fail deeper: in the argument checks of
  # the NIFs and in MLX.
  defp random_args(pool, module, _name, arity) when module in [ExMLX, ExMLX.FFT, ExMLX.Wire] do
    for position <- 1..arity do
      chance = if position == 1, do: 0.6, else: 0.4
      if :rand.uniform() < chance, do: pick(pool.tensors), else: plausible_or_random(pool)
    end
  end

  defp random_args(pool, _module, _name, arity), do: for(_ <- 1..arity, do: random_term(pool))

  # Half the time a value of a kind some function takes (a type, a shape,
  # axes, options), half the time anything.
  defp plausible_or_random(pool) do
    if :rand.uniform() < 0.5 do
      pick([
        pick([{:f, 32}, {:s, 32}, {:u, 8}, :bool, {:f, 64}, {:c, 64}]),
        pick([{}, {6}, {3, 2}, {2, 3}, {1, 6}, {6, 1, 1}, {4}]),
        pick([[0], [1], [-1], [0, 1], [1, 0], [2], [0, 0]]),
        pick([0, 1, 2, -1, 5]),
        pick([1.5, -2.0]),
        random_options(pool, 1)
      ])
    else
      random_term(pool)
    end
  end

  # -- the pool of values ------------------------------------------------------

  defp pool(dir) do
    tensors = [
      ExMLX.iota({:f, 32}, {2, 3}),
      ExMLX.iota({:s, 64}, {4}),
      ExMLX.iota({:f, 64}, {3, 2}, device: :cpu),
      ExMLX.full(1, {:u, 8}, {}),
      ExMLX.full(1, :bool, {3}),
      ExMLX.from_binary(<<>>, {:f, 16}, {0, 2}),
      ExMLX.full({1.0, 2.0}, {:c, 64}, {2, 1}),
      ExMLX.iota({:s, 32}, {2, 3, 4}) |> ExMLX.transpose([2, 0, 1])
    ]

    frame = ExMLX.Wire.encode(ExMLX.iota({:s, 16}, {3}))

    frames = [
      frame,
      binary_part(frame, 0, byte_size(frame) - 1),
      frame <> <<0>>,
      "EXMX" <> binary_part(frame, 4, 4),
      :binary.replace(frame, <<12>>, <<99>>),
      flip_byte(frame, byte_size(frame) - 1),
      flip_byte(frame, 5),
      <<"EXMX", 1, 12, 3, 0>> <> :binary.copy(<<255>>, 40)
    ]

    path = Path.join(dir, "good.safetensors")
    :ok = ExMLX.Wire.write_bundle(path, %{"x" => hd(tensors)})
    bad_file = Path.join(dir, "garbage.safetensors")
    File.write!(bad_file, :crypto.strong_rand_bytes(64))
    truncated = Path.join(dir, "truncated.safetensors")
    File.write!(truncated, binary_part(File.read!(path), 0, 20))

    nx =
      if Code.ensure_loaded?(Nx) do
        # (called through a variable: Nx is optional at compile time)
        nx = Nx

        [
          nx.iota({2, 2}),
          nx.tensor([1.0, 2.0], type: :f64),
          nx.iota({3}, backend: ExMLX.Backend),
          nx.template({2}, {:f, 32})
        ]
      else
        [{:not_nx, 1}]
      end

    %{
      tensors: tensors,
      frames: frames,
      nx: nx,
      path: path,
      bad_file: bad_file,
      truncated: truncated,
      missing: Path.join([dir, "missing", "x.safetensors"]),
      dir: dir
    }
  end

  defp flip_byte(binary, at) do
    <<before::binary-size(at), byte, rest::binary>> = binary
    <<before::binary, bxor(byte, 0x5A), rest::binary>>
  end

  # -- the run -----------------------------------------------------------------

  # {:ok, class} for an outcome within the contract above, {:bad, what} otherwise.
  defp outcome(module, name, args) do
    case apply(module, name, args) do
      # file functions pass on File's posix reasons (:enoent, :eisdir, ...)
      {:error, posix}
      when is_atom(posix) and name in [:read_bundle, :read_bundle_header, :write_bundle] ->
        {:ok, :error_tuple}

      returned ->
        case classify_return(returned) do
          {:ok, :value} -> {:ok, :value}
          {:ok, _kind} -> {:ok, :error_tuple}
          bad -> bad
        end
    end
  rescue
    e in ExMLX.Error ->
      if e.kind in error_kinds() and is_binary(e.message), do: {:ok, :raised}, else: {:bad, e}

    e in ArgumentError ->
      # Erlang's own badarg (from a NIF or a BIF) says nothing of the argument.
      message = Exception.message(e)

      if message == "argument error" or message =~ "errors were found at the given arguments",
        do: {:bad, e},
        else: {:ok, :raised}

    e ->
      {:bad, e}
  catch
    kind, value -> {:bad, {kind, value}}
  end

  @tag :tmp_dir
  test "#{@calls} random bad calls to every public function leave the VM alive", %{tmp_dir: dir} do
    :rand.seed(:exsss, {@seed, @seed, @seed})
    memory_limit = ExMLX.Memory.set_memory_limit(@memory_limit)
    cache_limit = ExMLX.Memory.stats().cache_limit
    ahead = for kind <- [:cpu, :gpu], do: {kind, ExMLX.evaluate_ahead?(kind)}

    on_exit(fn ->
      ExMLX.Memory.set_memory_limit(memory_limit)
      ExMLX.Memory.set_cache_limit(cache_limit)
    end)

    functions = functions()
    assert length(functions) >= 140

    {outcomes, bad, _pool} =
      Enum.reduce(1..@calls, {%{}, [], pool(dir)}, fn i, {acc, bad, pool} ->
        {module, name, arity} = pick(functions)
        args = random_args(pool, module, name, arity)
        result = outcome(module, name, args)

        # Undo what a call may have changed for the calls after it.
        if module == ExMLX.Memory do
          ExMLX.Memory.set_memory_limit(@memory_limit)
          ExMLX.Memory.set_cache_limit(cache_limit)
        end

        if name == :set_evaluate_ahead,
          do: for({kind, on} <- ahead, do: ExMLX.set_evaluate_ahead(kind, on))

        # Fresh tensors now and then (random calls deallocate some).
        pool =
          if rem(i, 1000) == 0 do
            drain_mailbox()
            pool(dir)
          else
            pool
          end

        case result do
          {:ok, class} -> {Map.update(acc, class, 1, &(&1 + 1)), bad, pool}
          {:bad, what} -> {acc, [{module, name, args, what} | bad], pool}
        end
      end)

    drain_mailbox()
    IO.puts("\n  bad-input calls to #{length(functions)} public functions: #{inspect(outcomes)}")

    assert bad == [],
           "#{length(bad)} calls ended outside the contract, e.g.:\n" <>
             Enum.map_join(
               Enum.take(Enum.reverse(bad), 8),
               "\n",
               &inspect(&1, limit: 12, printable_limit: 40)
             )

    # Most calls must be refused: the generator makes wrong arguments.
    assert Map.get(outcomes, :raised, 0) + Map.get(outcomes, :error_tuple, 0) > div(@calls, 2)

    # The VM, the workers and MLX still work.
    assert ExMLX.iota({:s, 32}, {4}) |> ExMLX.sum() |> ExMLX.item() == 6

    assert ExMLX.Wire.decode!(ExMLX.Wire.encode(ExMLX.iota({:u, 8}, {3}))) |> ExMLX.to_list() ==
             [0, 1, 2]
  end
end
