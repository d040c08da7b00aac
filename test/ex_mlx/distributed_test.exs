defmodule ExMLX.DistributedTest do
  # ExMLX.Distributed: the group of one in this VM, and groups of 2 and 4
  # ranks as separate OS processes on loopback (127.0.0.1) with MLX's ring
  # backend, started by ExMLX.Distributed.Launcher. The ranks run the
  # scripts in test/distributed/; the expected values are computed here from
  # the inputs those scripts make.
  use ExUnit.Case, async: false

  alias ExMLX.Distributed, as: D
  alias ExMLX.Distributed.Launcher

  @types [{:f, 32}, {:s, 32}, {:bf, 16}]

  doctest ExMLX.Distributed

  describe "without a group (the group of one, as MLX's)" do
    test "rank 0 of 1; reductions and gathers return their input" do
      assert %D.Group{rank: 0, size: 1, backend: :none, ref: nil} = D.group()
      assert {D.rank(), D.size()} == {0, 1}

      grads = %{a: [ExMLX.iota({:f, 32}, {2})], b: {ExMLX.iota({:bf, 16}, {3})}}
      assert D.average_gradients(grads) == grads

      for type <- @types do
        x = ExMLX.iota(type, {4})

        for f <- [&D.all_sum/1, &D.all_max/1, &D.all_min/1, &D.all_gather/1] do
          y = f.(x)
          assert {y.shape, y.type} == {{4}, type}
          assert ExMLX.to_list(y) == ExMLX.to_list(x)
        end
      end
    end

    test "send and recv are refused with MLX's messages" do
      x = ExMLX.iota({:f, 32}, {2})

      assert_raise ExMLX.Error, "Cannot send to a singleton group", fn -> D.send(x, 1) end

      assert_raise ExMLX.Error, "Cannot recv from a singleton group", fn ->
        D.recv({2}, {:f, 32}, 1)
      end

      assert_raise ExMLX.Error, "Cannot recv from a singleton group", fn -> D.recv_like(x, 1) end

      e = assert_raise ExMLX.Error, fn -> D.split(D.group(), 0) end
      assert {e.kind, e.message} == {:distributed, "Cannot split the distributed group further."}
    end
  end

  test "send and recv on an NCCL group of more than two ranks are refused before MLX is called" do
    # (a group as init/1 returns it for the third of four GPUs; its ref is
    # never used: the refusal comes first)
    group = %D.Group{ref: nil, rank: 2, size: 4, backend: :nccl, timeout: 1_000}
    x = ExMLX.iota({:f, 32}, {2})

    message =
      "send and recv on an NCCL group of 4 ranks: MLX 0.32's NCCL backend has no " <>
        "point-to-point transfer, which ExMLX carries through all_gather in a group of " <>
        "two only; use the collectives, or a ring group (backend: :ring)"

    for call <- [
          fn -> D.send(x, 3, group: group) end,
          fn -> D.recv({2}, {:f, 32}, 1, group: group) end,
          fn -> D.recv_like(x, 0, group: group) end
        ] do
      e = assert_raise ExMLX.Error, call
      assert {e.kind, e.message} == {:argument, message}
    end
  end

  describe "backends" do
    # MLX's CPU build has the ring only; its CUDA build (a GPU machine) has
    # MPI and NCCL as well, whose init then wants their own setup.
    @cuda_build ExMLX.device_available?(:gpu)

    test "the ring is in every build; MPI and NCCL in the CUDA build only" do
      assert D.available?(:ring)
      assert D.available?(:any)
      assert D.available?(:mpi) == @cuda_build
      assert D.available?(:nccl) == @cuda_build
    end

    if @cuda_build do
      test "NCCL without its setup gives MLX's clear error" do
        e = assert_raise ExMLX.Error, fn -> D.init(backend: :nccl, strict: true) end

        assert {e.kind, e.message} ==
                 {:distributed,
                  "[nccl] Required environment variable 'NCCL_HOST_IP' is not set. " <>
                    "Please set it before initializing the distributed backend."}
      end
    end

    @tag skip: if(@cuda_build, do: "the CUDA build has NCCL and MPI")
    test "NCCL (and MPI) give a clear \"not available\" error, strict or not" do
      for backend <- [:nccl, :mpi], strict <- [true, false] do
        e = assert_raise ExMLX.Error, fn -> D.init(backend: backend, strict: strict) end
        assert e.kind == :distributed

        assert e.message ==
                 "the #{backend} backend is not available in this MLX build " <>
                   "(MLX #{ExMLX.Native.mlx_version()}); available: ring"
      end

      # nothing was initialized
      assert D.group().size == 1
    end

    test "bad arguments are refused, naming them" do
      # (init's :hostfile and :rank go through this NIF; nothing else may)
      assert ExMLX.Native.dist_setenv("PATH", "/tmp") ==
               {:error, {:argument, ~s(name: expected "MLX_HOSTFILE" or "MLX_RANK", got: "PATH")}}

      assert ExMLX.Native.dist_setenv("MLX_RANK", "") ==
               {:error, {:argument, ~s(value: expected a non-empty string without NUL, got: "")}}

      e = assert_raise ExMLX.Error, fn -> D.init(backend: :gloo) end

      assert {e.kind, e.message} ==
               {:argument, "backend: expected :any, :ring, :mpi or :nccl, got: :gloo"}

      e = assert_raise ExMLX.Error, fn -> D.send(ExMLX.iota({:f, 32}, {2}), :left) end
      assert {e.kind, e.message} == {:argument, "dst: expected a rank (an integer), got: :left"}

      e = assert_raise ExMLX.Error, fn -> D.recv({2}, {:f, 32}, 1, device: :tpu) end

      assert {e.kind, e.message} ==
               {:argument,
                "device: expected a device, :cpu, :gpu or a stream ({:gpu, 1}), got: :tpu"}

      assert_raise ArgumentError, fn -> D.all_sum(ExMLX.iota({:f, 32}, {2}), grup: nil) end

      assert_raise ArgumentError, "tensor: expected an ExMLX.Tensor, got: [1.0]", fn ->
        D.all_sum([1.0])
      end

      assert_raise ArgumentError,
                   "average_gradients: #ExMLX.Tensor<s32[2] #{ExMLX.default_device()}> is not " <>
                     "floating-point or complex; an average of {:s, 32} values is not one",
                   fn -> D.average_gradients(%{a: ExMLX.iota({:s, 32}, {2})}) end

      assert_raise ArgumentError, ~r/expected tensors in maps, lists and tuples, got: :x/, fn ->
        D.average_gradients([ExMLX.iota({:f, 32}, {2}), :x])
      end
    end
  end

  describe "hostfiles" do
    @tag :tmp_dir
    test "written as MLX's JSON and read back", %{tmp_dir: dir} do
      hosts = D.loopback_hostfile(3)
      assert length(Enum.uniq(hosts)) == 3
      path = Path.join(dir, "hosts.json")
      File.write!(path, D.hostfile_json(hosts))
      assert D.read_hostfile(path) == hosts

      File.write!(
        path,
        ~s([["10.0.0.1:5000", "10.0.0.1:5001"], ["10.0.0.2:5000", "10.0.0.2:5001"]])
      )

      assert D.read_hostfile(path) == [
               ~w(10.0.0.1:5000 10.0.0.1:5001),
               ~w(10.0.0.2:5000 10.0.0.2:5001)
             ]

      File.write!(path, ~s([["10.0.0.1"]]))
      assert_raise ArgumentError, ~r/"10.0.0.1" is not "ip:port"/, fn -> D.read_hostfile(path) end
    end
  end

  # ---------------------------------------------------------------------------
  # Ranks as OS processes
  # ---------------------------------------------------------------------------

  # `elixir` with this build's ex_mlx on its code path, running `script`.
  defp rank_command(script) do
    ebin = ExMLX.Distributed |> :code.which() |> to_string() |> Path.dirname()
    {"elixir", ["-pa", ebin, Path.join("test/distributed", script)]}
  end

  defp launch(script, opts) do
    {:ok, store} = Agent.start_link(fn -> [] end)
    output = fn rank, line -> Agent.update(store, &[{rank, line} | &1]) end
    statuses = Launcher.run(rank_command(script), [output: output] ++ opts)
    lines = store |> Agent.get(& &1) |> Enum.reverse()
    Agent.stop(store)
    {statuses, lines}
  end

  defp lines_of(lines, rank), do: for({^rank, line} <- lines, do: line)

  defp result(lines, rank) do
    case for "RESULT " <> data <- lines_of(lines, rank), do: data do
      [data] -> data |> Base.decode64!() |> :erlang.binary_to_term()
      _ -> flunk("rank #{rank} printed no result:\n" <> Enum.join(lines_of(lines, rank), "\n"))
    end
  end

  # What the collectives script's rank r holds: element i is (r + 1) * (i - 2) / 2
  # ({:s, 32}: twice that).
  defp input(rank, type) do
    for i <- 0..4 do
      v = (rank + 1) * (i - 2) / 2
      if type == {:s, 32}, do: round(2 * v), else: v
    end
  end

  defp zip_with(lists, fun), do: lists |> Enum.zip() |> Enum.map(&fun.(Tuple.to_list(&1)))

  for n <- [2, 4] do
    @tag timeout: 300_000
    test "#{n} ranks on loopback: every collective exact for f32, s32 and bf16" do
      n = unquote(n)
      {statuses, lines} = launch("collectives.exs", n: n, deadline: 240_000)
      assert statuses == Map.new(0..(n - 1), &{&1, 0}), inspect(lines, limit: :infinity)

      for rank <- 0..(n - 1) do
        {^rank, ^n, :ring, results} = result(lines, rank)
        {averages, results} = Map.pop(results, :average_gradients)
        {split, results} = Map.pop(results, :split)
        assert split == {:distributed, "[ring] Group split not supported."}
        assert Map.keys(results) |> Enum.sort() == Enum.sort(@types)

        # the means over ranks r of r + 1, 2 * (r + 1) and r * i
        mean = fn f -> Enum.sum(for r <- 0..(n - 1), do: f.(r)) / n end

        expected = [
          {{3, 2}, {:f, 32}, List.duplicate(mean.(&(&1 + 1)), 6)},
          {{4}, {:bf, 16}, List.duplicate(mean.(&(2 * (&1 + 1))), 4)},
          {{5}, {:f, 32}, for(i <- 0..4, do: mean.(&(&1 * i)))}
        ]

        assert averages == %{(32 * 1024 * 1024) => expected, 16 => expected}

        for type <- @types do
          inputs = for r <- 0..(n - 1), do: input(r, type)
          got = results[type]
          left = rem(rank + n - 1, n)
          right = rem(rank + 1, n)

          assert got.result_type == type
          assert got.all_sum == zip_with(inputs, &Enum.sum/1), "#{inspect(type)} all_sum"
          assert got.all_max == zip_with(inputs, &Enum.max/1), "#{inspect(type)} all_max"
          assert got.all_min == zip_with(inputs, &Enum.min/1), "#{inspect(type)} all_min"
          assert got.all_gather == Enum.concat(inputs), "#{inspect(type)} all_gather"
          assert got.recv == input(left, type), "#{inspect(type)} recv from the left"
          assert got.recv_like == input(right, type), "#{inspect(type)} recv_like from the right"
        end
      end
    end
  end

  # (:mix_project: runs Mix in this project, which the staged GPU run,
  # bench/gpu/suite.exs, has no build of)
  @tag :mix_project
  @tag timeout: 300_000
  test "mix ex_mlx.launch -n 2 runs a script as two ranks, output prefixed by rank" do
    {out, status} =
      System.cmd("mix", ["ex_mlx.launch", "-n", "2", "test/distributed/hello.exs"],
        env: [{"MIX_ENV", "test"}],
        stderr_to_stdout: true
      )

    assert status == 0, out
    lines = String.split(out, "\n")
    assert "[0] rank 0 of 2 (ring): all_sum 3" in lines, out
    assert "[1] rank 1 of 2 (ring): all_sum 3" in lines, out
  end

  @tag timeout: 300_000
  test "a tensor moved to another BEAM node over Erlang distribution arrives bit for bit" do
    env = [
      {"ERL_EPMD_ADDRESS", "127.0.0.1"},
      {"EX_MLX_TEST_RUN", "#{System.unique_integer([:positive])}"}
    ]

    {statuses, lines} = launch("nodes.exs", n: 2, env: env, deadline: 240_000)
    assert statuses == %{0 => 0, 1 => 0}, inspect(lines)
    sent = result(lines, 0)
    assert result(lines, 1) == sent

    device = ExMLX.default_device()

    assert [
             {{2, 3}, {:s, 32}, ^device, ints},
             {{2}, {:bf, 16}, ^device, <<0, 0x80, 0, 0x80>>},
             {{512, 1024}, {:f, 32}, ^device, big}
           ] = sent

    assert ints == for(i <- 0..5, into: <<>>, do: <<i::signed-32-little>>)
    assert big == for(i <- 0..(512 * 1024 - 1), into: <<>>, do: <<i * 0.5::float-32-little>>)
  end

  @tag timeout: 300_000
  test "init's :hostfile and :rank reach MLX (ranks started without MLX_RANK, MLX_HOSTFILE)" do
    path = Path.join(System.tmp_dir!(), "ex_mlx_hosts_#{System.unique_integer([:positive])}.json")
    File.write!(path, D.hostfile_json(D.loopback_hostfile(2)))

    # (one rank per launch: a launch of one rank sets no MLX variables)
    runs =
      for rank <- 0..1 do
        env = [{"EX_MLX_INIT_RANK", "#{rank}"}, {"EX_MLX_INIT_HOSTFILE", path}]
        Task.async(fn -> launch("init_options.exs", n: 1, env: env, deadline: 240_000) end)
      end

    results = Task.await_many(runs, :infinity)
    File.rm(path)

    for {{statuses, lines}, rank} <- Enum.with_index(results) do
      assert statuses == %{0 => 0}, inspect(lines)
      assert result(lines, 0) == {rank, 2, 3.0}
    end
  end

  test "the launcher gives NCCL ranks what MLX's NCCL backend reads, one GPU each" do
    me = self()

    script =
      ~s(echo "$MLX_RANK $MLX_WORLD_SIZE $NCCL_HOST_IP $CUDA_VISIBLE_DEVICES $NCCL_NVLS_ENABLE $NCCL_PORT")

    statuses =
      D.Launcher.run({"sh", ["-c", script]},
        n: 2,
        backend: :nccl,
        output: fn rank, line -> send(me, {rank, String.split(line)}) end
      )

    assert statuses == %{0 => 0, 1 => 0}
    assert_receive {0, ["0", "2", "127.0.0.1", "0", "0", port]}
    assert_receive {1, ["1", "2", "127.0.0.1", "1", "0", ^port]}
    assert String.to_integer(port) in 1..65_535

    assert_raise ArgumentError, ":backend must be :ring or :nccl, got: :gloo", fn ->
      D.Launcher.run({"true", []}, n: 1, backend: :gloo)
    end
  end

  @tag :tmp_dir
  @tag :mix_project
  @tag timeout: 300_000
  test "mix ex_mlx.launch --hostfile starts the ranks named by --ranks", %{tmp_dir: dir} do
    hostfile = Path.join(dir, "hosts.json")
    File.write!(hostfile, D.hostfile_json(D.loopback_hostfile(2)))

    {out, status} =
      System.cmd(
        "mix",
        ~w(ex_mlx.launch --hostfile #{hostfile} --ranks 0,1 test/distributed/hello.exs),
        env: [{"MIX_ENV", "test"}],
        stderr_to_stdout: true
      )

    assert status == 0, out
    assert "[0] rank 0 of 2 (ring): all_sum 3" in String.split(out, "\n"), out
    assert "[1] rank 1 of 2 (ring): all_sum 3" in String.split(out, "\n"), out
  end

  # The bounded-failure runs: the configured timeout, and the margin within
  # which the surviving rank must have given up by itself (past it the
  # launcher kills it, and the test fails).
  @failure_timeout 4_000
  @margin 60_000

  defp failure_run(mode, launch_opts) do
    env = [
      {"EX_MLX_TEST_MODE", mode},
      {"EX_MLX_TEST_TIMEOUT", Integer.to_string(@failure_timeout)}
    ]

    opts = [env: env, deadline: @failure_timeout + @margin, grace: 1_000]
    launch("failure.exs", Keyword.merge(opts, launch_opts))
  end

  # What follows `prefix` on the line rank 0 printed it on. The rank's
  # standard error comes in the same stream, and MLX's ring backend writes
  # its messages there in pieces from its own threads, so a piece may start
  # the line the script's outcome (one write) ends.
  defp outcome(lines, prefix) do
    found =
      for line <- lines_of(lines, 0),
          [_, rest] <- [String.split(line, prefix, parts: 2)],
          do: rest

    case found do
      [rest] -> rest
      _ -> flunk("rank 0 printed no #{prefix}line:\n" <> Enum.join(lines_of(lines, 0), "\n"))
    end
  end

  @disabled ~r/^distributed distributed calls are disabled in this OS process: .* did not finish within 4000 ms$/

  @tag timeout: 300_000
  test "a peer missing at init: the rank fails with a timeout error within the configured timeout" do
    {statuses, lines} = failure_run("missing", n: 2, ranks: [0])
    # it exited by itself (3: the script's status after printing its outcome)
    assert statuses == %{0 => 3}, inspect(lines)

    assert outcome(lines, "OUTCOME ") ==
             "timeout init (backend :ring) did not finish within 4000 ms " <>
               "(a peer that is missing, stopped or too slow); MLX cannot cancel it, " <>
               "so distributed calls are disabled in this OS process from now on"

    assert outcome(lines, "AFTER ") =~ @disabled
  end

  @tag timeout: 300_000
  test "a peer killed mid-collective: the survivor gets MLX's error, no hang, no crash" do
    # (rank 0 must stop by itself: the launcher does not kill it early)
    {statuses, lines} = failure_run("killed", n: 2, grace: @margin)
    assert statuses[0] == 3, inspect(lines)
    assert statuses[1] not in [0, 3, :killed]
    # MLX 0.32.2 reports the lost connection itself (no timeout needed), and
    # the group is unusable after it
    assert outcome(lines, "OUTCOME ") == "distributed [ring] connection to a peer was lost"

    assert outcome(lines, "AFTER ") ==
             "distributed distributed calls are disabled in this OS process: " <>
               "an earlier collective failed: [ring] connection to a peer was lost"
  end

  @tag timeout: 300_000
  test "a peer stopped mid-collective: the survivor's collective times out (the watchdog)" do
    {statuses, lines} = failure_run("stopped", n: 2)
    assert statuses == %{0 => 3, 1 => :killed}, inspect(lines)
    assert outcome(lines, "OUTCOME ") =~ ~r/^timeout all_sum of .* did not finish within 4000 ms/
    assert outcome(lines, "AFTER ") =~ @disabled
  end
end
