# ExMLX.Distributed on a GPU machine (bench/gpu/README.md: run with
# `bench/gpu/run.sh elixir bench/gpu/distributed_probe.exs`): which backends
# MLX's CUDA build has, what NCCL's init says on one process, the group of
# one on :gpu tensors, and two ranks (OS processes, MLX's ring on 127.0.0.1)
# running the collectives on :gpu tensors, checked exactly for f32, s32 and
# bf16. Prints one line per finding; exits 1 if a check fails.
Code.require_file("ranks.exs", __DIR__)
alias ExMLX.Distributed, as: D

case System.argv() do
  ["rank"] ->
    g = D.init(backend: :ring, strict: true, timeout: 60_000)
    right = rem(g.rank + 1, g.size)

    for type <- [{:f, 32}, {:s, 32}, {:bf, 16}] do
      x = ExMLX.full(g.rank + 1, type, {4}, device: :gpu)
      :ok = D.send(x, right)
      got = D.recv({4}, type, right, device: :gpu)
      sum = D.all_sum(x)
      gather = D.all_gather(x)
      max = D.all_max(x)

      IO.puts(
        "RANK #{g.rank} #{inspect(type)} sum=#{inspect(ExMLX.to_list(sum))} on #{sum.device} " <>
          "max=#{inspect(ExMLX.to_list(max))} gather=#{inspect(ExMLX.to_list(gather))} " <>
          "recv=#{inspect(ExMLX.to_list(got))} on #{got.device}"
      )
    end

  [] ->
    check = fn what, ok? ->
      IO.puts("#{if ok?, do: "ok  ", else: "FAIL"} #{what}")
      ok?
    end

    IO.puts("gpu available: #{ExMLX.device_available?(:gpu)}")
    for b <- [:ring, :mpi, :nccl, :any], do: IO.puts("backend #{b} available: #{D.available?(b)}")

    nccl =
      try do
        g = D.init(backend: :nccl, strict: true, timeout: 20_000)
        "joined: rank #{g.rank} of #{g.size} (#{g.backend})"
      rescue
        e in ExMLX.Error -> "#{e.kind}: #{e.message}"
      end

    IO.puts("nccl init, one process, strict: #{nccl}")

    x = ExMLX.full(1.5, {:bf, 16}, {3}, device: :gpu)
    y = D.all_sum(x)
    one = check.("group of one on :gpu", y.device == :gpu and ExMLX.to_list(y) == [1.5, 1.5, 1.5])

    {statuses, lines} = Bench.GPU.Ranks.run(__ENV__.file, n: 2, deadline: 240_000)

    expected = fn type ->
      v = fn k -> if type == {:s, 32}, do: k, else: k * 1.0 end

      "#{inspect(type)} sum=#{inspect(List.duplicate(v.(3), 4))} on gpu " <>
        "max=#{inspect(List.duplicate(v.(2), 4))} " <>
        "gather=#{inspect(List.duplicate(v.(1), 4) ++ List.duplicate(v.(2), 4))}"
    end

    two =
      for rank <- 0..1, type <- [{:f, 32}, {:s, 32}, {:bf, 16}] do
        other = if rank == 0, do: 2, else: 1
        v = if type == {:s, 32}, do: other, else: other * 1.0
        want = "RANK #{rank} #{expected.(type)} recv=#{inspect(List.duplicate(v, 4))} on gpu"
        check.("2 ranks, #{inspect(type)}, rank #{rank}", want in lines)
      end

    ok = check.("2 ranks exited 0", statuses == %{0 => 0, 1 => 0}) and one and Enum.all?(two)
    System.halt(if ok, do: 0, else: 1)
end
