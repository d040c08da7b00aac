# MLX's NCCL backend through ExMLX.Distributed, one rank per GPU
# (bench/gpu/README.md; issue: NCCL collectives on several GPUs):
#
#   bench/gpu/run.sh elixir bench/gpu/nccl_probe.exs [N]
#
# starts N ranks (default: every GPU nvidia-smi lists) with
# ExMLX.Distributed.Launcher's `backend: :nccl` (NCCL_NVLS_ENABLE=0), each
# running this script as "rank": all_sum, all_gather and send/recv on :gpu
# tensors checked exactly for f32 and bf16, then all_sum's bandwidth at 1 MB,
# 64 MB and 1 GB. Prints one line per finding; exits 1 if a check fails.
import Bitwise
alias ExMLX.Distributed, as: D

case System.argv() do
  ["rank"] ->
    g = D.init(backend: :nccl, strict: true, timeout: 120_000)
    say = fn line -> IO.puts("RANK #{g.rank} #{line}") end
    say.("joined: #{g.size} ranks (#{g.backend})")

    for type <- [{:f, 32}, {:bf, 16}] do
      x = ExMLX.full(g.rank + 1, type, {4}, device: :gpu)
      sum = D.all_sum(x) |> ExMLX.to_list()
      gather = D.all_gather(x) |> ExMLX.to_list()
      say.("#{inspect(type)} sum=#{inspect(sum)} gather=#{inspect(gather)}")

      if g.size > 1 do
        right = rem(g.rank + 1, g.size)
        left = rem(g.rank - 1 + g.size, g.size)

        recv =
          try do
            # (even ranks send first: NCCL's send and recv block)
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

    for {bytes, label} <- [{1 <<< 20, "1 MB"}, {64 <<< 20, "64 MB"}, {1 <<< 30, "1 GB"}] do
      x = ExMLX.full(1.0, {:f, 32}, {div(bytes, 4)}, device: :gpu) |> ExMLX.eval()
      for _ <- 1..3, do: D.all_sum(x) |> ExMLX.eval()

      samples =
        for _ <- 1..10 do
          t = System.monotonic_time()
          D.all_sum(x) |> ExMLX.eval()
          System.convert_time_unit(System.monotonic_time() - t, :native, :microsecond)
        end

      us = samples |> Enum.sort() |> Enum.at(5)
      say.("all_sum #{label}: #{us} µs, #{Float.round(bytes / us / 1.0e3, 2)} GB/s (algorithm)")
    end

  args ->
    n =
      case args do
        [n] ->
          String.to_integer(n)

        [] ->
          {out, 0} = System.cmd("nvidia-smi", ["-L"])
          out |> String.split("\n", trim: true) |> length()
      end

    ebin = ExMLX.Distributed |> :code.which() |> to_string() |> Path.dirname()
    {:ok, store} = Agent.start_link(fn -> [] end)

    statuses =
      D.Launcher.run({"elixir", ["-pa", ebin, __ENV__.file, "rank"]},
        n: n,
        backend: :nccl,
        deadline: 400_000,
        output: fn rank, line ->
          IO.puts("[#{rank}] #{line}")
          Agent.update(store, &[line | &1])
        end
      )

    lines = Agent.get(store, & &1)

    checks =
      for rank <- 0..(n - 1), type <- [{:f, 32}, {:bf, 16}] do
        v = fn k -> k * 1.0 end
        sum = List.duplicate(v.(n * (n + 1) / 2), 4)
        gather = Enum.flat_map(1..n, &List.duplicate(v.(&1), 4))
        want = "RANK #{rank} #{inspect(type)} sum=#{inspect(sum)} gather=#{inspect(gather)}"
        ok = want in lines

        IO.puts(
          "#{if ok, do: "ok  ", else: "FAIL"} #{n} rank(s), rank #{rank}, #{inspect(type)} all_sum, all_gather"
        )

        ok
      end

    ok = statuses == Map.new(0..(n - 1), &{&1, 0}) and Enum.all?(checks)
    IO.puts("#{if ok, do: "ok  ", else: "FAIL"} #{n} rank(s) exited: #{inspect(statuses)}")
    System.halt(if ok, do: 0, else: 1)
end
