# MLX's NCCL backend through ExMLX.Distributed, one rank per GPU
# (bench/gpu/README.md; issue: NCCL collectives on several GPUs):
#
#   bench/gpu/run.sh elixir bench/gpu/nccl_probe.exs [N]
#
# starts N ranks (default: every GPU nvidia-smi lists) with
# ExMLX.Distributed.Launcher's `backend: :nccl` (NCCL_NVLS_ENABLE=0), each
# running this script as "rank": all_sum, all_gather, all_max, all_min and
# send/recv on :gpu tensors checked exactly for f32, bf16 and s32; a call
# with a bad peer, then a collective (the group must stay usable); all_sum's
# time at 1 MB, 64 MB and 1 GB ("BW exmlx <size> <µs> <GB/s algorithm>
# <GB/s bus>", as bench/gpu/nccl_reference.py prints its own); then the last
# rank halts and the others report how their next collective failed. Prints
# one line per finding; exits 1 if a check fails.
Code.require_file("ranks.exs", __DIR__)
import Bitwise
alias ExMLX.Distributed, as: D

case System.argv() do
  ["rank"] ->
    g = D.init(backend: :nccl, strict: true, timeout: 120_000)
    say = fn line -> IO.puts("RANK #{g.rank} #{line}") end
    say.("joined: #{g.size} ranks (#{g.backend})")

    for type <- [{:f, 32}, {:bf, 16}, {:s, 32}] do
      x = ExMLX.full(g.rank + 1, type, {4}, device: :gpu)

      values =
        for op <- [:all_sum, :all_gather, :all_max, :all_min],
            do: "#{op}=#{inspect(apply(D, op, [x]) |> ExMLX.to_list())}"

      say.("#{inspect(type)} #{Enum.join(values, " ")}")

      if g.size > 1 do
        right = rem(g.rank + 1, g.size)
        left = rem(g.rank - 1 + g.size, g.size)

        recv =
          try do
            # (even ranks send first, as over a blocking transport)
            if rem(g.rank, 2) == 0 do
              :ok = D.send(x, right)
              D.recv({4}, type, left, device: :gpu) |> ExMLX.to_list() |> inspect()
            else
              got = D.recv({4}, type, left, device: :gpu) |> ExMLX.to_list() |> inspect()
              :ok = D.send(x, right)
              got
            end
          rescue
            e in ExMLX.Error -> "error #{e.kind}: #{e.message}"
          end

        say.("#{inspect(type)} recv=#{recv}")
      end
    end

    # the caller's errors leave the group usable
    refused =
      try do
        D.send(ExMLX.full(1, {:f, 32}, {4}, device: :gpu), g.size + 3)
        "not refused"
      rescue
        e in [ExMLX.Error, ArgumentError] -> Exception.message(e)
      end

    after_error = D.all_sum(ExMLX.full(1, {:f, 32}, {2}, device: :gpu)) |> ExMLX.to_list()
    say.("bad peer: #{refused}; all_sum after it=#{inspect(after_error)}")

    for {bytes, label} <- [{1 <<< 20, "1MB"}, {64 <<< 20, "64MB"}, {1 <<< 30, "1GB"}] do
      x = ExMLX.full(1.0, {:f, 32}, {div(bytes, 4)}, device: :gpu) |> ExMLX.eval()
      for _ <- 1..3, do: D.all_sum(x) |> ExMLX.eval() |> ExMLX.deallocate()

      samples =
        for _ <- 1..10 do
          t = System.monotonic_time()
          sum = D.all_sum(x) |> ExMLX.eval()
          us = System.convert_time_unit(System.monotonic_time() - t, :native, :microsecond)
          # (freed now, as Python frees its result, rather than at the
          # next garbage collection: MLX reuses its buffer)
          ExMLX.deallocate(sum)
          us
        end

      us = samples |> Enum.sort() |> Enum.at(5)
      algo = bytes / us / 1.0e3
      bus = algo * 2 * (g.size - 1) / g.size
      say.("BW exmlx #{label} #{us} #{Float.round(algo, 2)} #{Float.round(bus, 2)}")
    end

    # a rank that dies: the last rank halts; the others' next collective
    # fails within its timeout (10 s), and the group then refuses calls
    if g.size > 1 do
      if g.rank == g.size - 1, do: System.halt(0)
      t = System.monotonic_time(:millisecond)

      outcome =
        try do
          D.all_sum(ExMLX.full(1, {:f, 32}, {4}, device: :gpu), timeout: 10_000)
          |> ExMLX.to_list()

          "no error"
        rescue
          e in ExMLX.Error -> "#{e.kind}: #{e.message}"
        end

      say.("peer gone: #{outcome} after #{System.monotonic_time(:millisecond) - t} ms")
    end

    System.halt(0)

  args ->
    n =
      case args do
        [n] ->
          String.to_integer(n)

        [] ->
          {out, 0} = System.cmd("nvidia-smi", ["-L"])
          out |> String.split("\n", trim: true) |> length()
      end

    {statuses, lines} = Bench.GPU.Ranks.run(__ENV__.file, n: n, backend: :nccl, deadline: 300_000)

    checks =
      for rank <- 0..(n - 1), type <- [{:f, 32}, {:bf, 16}, {:s, 32}] do
        v = fn k -> if type == {:s, 32}, do: k, else: k * 1.0 end
        sum = List.duplicate(v.(div(n * (n + 1), 2)), 4)
        gather = Enum.flat_map(1..n, &List.duplicate(v.(&1), 4))
        max = List.duplicate(v.(n), 4)
        min = List.duplicate(v.(1), 4)

        want =
          "RANK #{rank} #{inspect(type)} all_sum=#{inspect(sum)} all_gather=#{inspect(gather)} " <>
            "all_max=#{inspect(max)} all_min=#{inspect(min)}"

        # the left neighbour's value, received (in a group of two, through
        # all_gather: ExMLX.Distributed.send/3)
        left = rem(rank - 1 + n, n)
        recv = "RANK #{rank} #{inspect(type)} recv=#{inspect(List.duplicate(v.(left + 1), 4))}"
        ok = want in lines and (n == 1 or n > 2 or recv in lines)

        IO.puts(
          "#{if ok, do: "ok  ", else: "FAIL"} #{n} rank(s), rank #{rank}, #{inspect(type)} " <>
            "all_sum, all_gather, all_max, all_min#{if n == 2, do: ", send/recv", else: ""}"
        )

        ok
      end

    ok = Map.get(statuses, 0) == 0 and Enum.all?(checks)
    IO.puts("#{if ok, do: "ok  ", else: "FAIL"} #{n} rank(s) exited: #{inspect(statuses)}")
    System.halt(if ok, do: 0, else: 1)
end
