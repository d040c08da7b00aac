# bin/bench's distributed section (bench/suite.exs runs it).
defmodule Bench.DistributedSection do
  @mb 1024 * 1024

  # all_sum across ranks that are OS processes on this machine (loopback,
  # MLX's ring backend): ExMLX (bench/distributed_rank.exs) and Python mlx
  # (bench/distributed_reference.py), started alike by
  # ExMLX.Distributed.Launcher, alternated `rounds` times; and a plain TCP
  # copy of the same bytes over loopback. Rank 0's median per run; each side
  # reports the median of its runs, the ratio the median of the per-round
  # ratios.
  @no_spin "+sbwt none +sbwtdcpu none +sbwtdio none"

  def section(quick) do
    {ranks, sizes, rounds} =
      if quick, do: {[2], [1 * @mb], 1}, else: {[2, 4], [1 * @mb, 64 * @mb], 3}

    reps = fn bytes -> if quick, do: 3, else: if(bytes > @mb, do: 7, else: 31) end

    ebin = ExMLX.Distributed |> :code.which() |> to_string() |> Path.dirname()
    python_dir = with {:ok, dir} <- ExMLX.Build.bench_python(), do: dir

    run_ranks = fn command, n, env, prefix ->
      {:ok, store} = Agent.start_link(fn -> [] end)

      statuses =
        ExMLX.Distributed.Launcher.run(command,
          n: n,
          env: env,
          output: fn rank, line -> Agent.update(store, &[{rank, line} | &1]) end,
          deadline: 600_000
        )

      lines = Agent.get(store, & &1)
      Agent.stop(store)

      if Enum.all?(statuses, fn {_, s} -> s == 0 end) do
        Enum.find_value(lines, {:error, :no_output}, fn {rank, line} ->
          if rank == 0 and String.starts_with?(line, prefix),
            do: String.replace_prefix(line, prefix, "")
        end)
      else
        {:error, {statuses, Enum.take(lines, 5)}}
      end
    end

    exmlx = fn n, bytes ->
      # (the BEAM's schedulers spin while idle; with more ranks than cores
      # that takes the cores MLX's socket threads need, so they sleep here,
      # as mix ex_mlx.launch -n has them do)
      args = ["--erl", @no_spin, "-pa", ebin, "bench/distributed_rank.exs"]

      case run_ranks.({"elixir", args ++ ["#{bytes}", "#{reps.(bytes)}"]}, n, [], "BENCH ") do
        data when is_binary(data) ->
          data |> Base.decode64!() |> :erlang.binary_to_term() |> Map.get(:median)

        _ ->
          nil
      end
    end

    python = fn n, bytes ->
      with dir when is_binary(dir) <- python_dir,
           data when is_binary(data) <-
             run_ranks.(
               {"python3",
                ["bench/distributed_reference.py", "rank", "#{bytes}", "#{reps.(bytes)}"]},
               n,
               [{"PYTHONPATH", dir <> ":bench"}],
               "{"
             ),
           {:ok, parsed} <- Bench.JSON.decode("{" <> data) do
        parsed["median"]
      else
        _ -> nil
      end
    end

    tcp = fn bytes ->
      {out, status} =
        System.cmd(
          "python3",
          ["bench/distributed_reference.py", "tcp", "#{bytes}", "#{reps.(bytes)}"],
          stderr_to_stdout: true
        )

      with 0 <- status,
           {:ok, parsed} <-
             Bench.JSON.decode(out |> String.split("\n", trim: true) |> List.last()) do
        parsed["median"]
      else
        _ -> nil
      end
    end

    median = fn xs ->
      case xs |> Enum.reject(&is_nil/1) |> Enum.sort() do
        [] -> nil
        sorted -> Enum.at(sorted, div(length(sorted), 2))
      end
    end

    ms = fn
      nil -> "n/a"
      t -> :erlang.float_to_binary(t * 1000, decimals: 2)
    end

    results =
      for n <- ranks, bytes <- sizes do
        per_round =
          for _ <- 1..rounds do
            py = python.(n, bytes)
            ex = exmlx.(n, bytes)
            {ex, py, if(ex && py, do: ex / py)}
          end

        {n, bytes, median.(Enum.map(per_round, &elem(&1, 0))),
         median.(Enum.map(per_round, &elem(&1, 1))), median.(Enum.map(per_round, &elem(&1, 2))),
         tcp.(bytes)}
      end

    rows =
      for {n, bytes, ex, py, ratio, copy} <- results do
        [
          "all_sum of #{div(bytes, @mb)} MB f32, #{n} ranks",
          ms.(ex),
          ms.(py),
          if(ratio, do: :erlang.float_to_binary(ratio, decimals: 2) <> "×", else: "n/a"),
          ms.(copy)
        ]
      end

    growth =
      for bytes <- sizes,
          [{_, _, a, _, _, _}, {_, _, b, _, _, _}] <- [
            Enum.filter(results, &(elem(&1, 1) == bytes))
          ],
          a && b do
        "#{div(bytes, @mb)} MB: 4 ranks take #{:erlang.float_to_binary(b / a, decimals: 2)}× the time of 2"
      end

    %{
      title:
        "Distributed all_sum on loopback, ranks as OS processes, MLX's ring backend " <>
          "(ms, rank 0's median; ratio = ExMLX / Python mlx, median over #{rounds} round(s))",
      columns: ["ExMLX", "Python mlx", "ratio", "TCP copy of the bytes"],
      rows: rows,
      notes:
        "All ranks share this machine's #{:erlang.system_info(:logical_processors)} cores. " <>
          Enum.join(growth, "; ") <>
          if(growth != [], do: ". ", else: "") <>
          "docs/distributed.md reads these figures for 8 to 64 hosts."
    }
  end
end
