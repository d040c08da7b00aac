if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.DistributedDefnTest do
    # ExMLX.Distributed.Defn (Nx only): the collectives inside defn compiled
    # with ExMLX.Compiler, on the group of one in this VM; and
    # examples/data_parallel.exs, trained on 1, 2 and 4 ranks (OS processes on
    # loopback), reaching the same loss.
    use ExUnit.Case, async: false
    @moduletag :nx

    import ExUnit.CaptureLog

    alias ExMLX.Distributed.Launcher

    if Code.ensure_loaded?(Nx) do
      defmodule Steps do
        import Nx.Defn
        alias ExMLX.Distributed.Defn, as: D

        defn reduced(x) do
          {D.all_sum(x * 2), D.all_max(x), D.all_min(x), D.all_gather(x)}
        end

        defn(averaged(grads), do: D.average_gradients(grads))
      end
    end

    test "inside defn compiled with ExMLX.Compiler: the group of one's results" do
      x = Nx.tensor([1.0, -2.0, 3.0], backend: ExMLX.Backend)
      f = Nx.Defn.jit(&__MODULE__.Steps.reduced/1, compiler: ExMLX.Compiler)

      {{sum, max, min, gather}, log} = with_log(fn -> f.(x) end)
      assert Nx.to_list(sum) == [2.0, -4.0, 6.0]
      assert Nx.to_list(max) == [1.0, -2.0, 3.0]
      assert Nx.to_list(min) == [1.0, -2.0, 3.0]
      assert {Nx.shape(gather), Nx.to_list(gather)} == {{3}, [1.0, -2.0, 3.0]}
      assert log =~ "running on Nx.Defn.Evaluator: a runtime_call"

      grads = %{w: Nx.tensor([[0.5, 1.5]], type: :bf16), b: {Nx.tensor(2.0)}}
      avg = Nx.Defn.jit(&__MODULE__.Steps.averaged/1, compiler: ExMLX.Compiler).(grads)
      assert Nx.to_list(avg.w) == [[0.5, 1.5]]
      assert Nx.type(avg.w) == {:bf, 16}
      assert Nx.to_number(elem(avg.b, 0)) == 2.0
    end

    # `elixir` with this build's ex_mlx, Nx and Nx's dependencies on its code path.
    defp rank_command(script, args) do
      paths =
        for app <- [:ex_mlx, :nx, :complex, :telemetry],
            dir = :code.lib_dir(app),
            is_list(dir),
            do: ["-pa", Path.join(dir, "ebin")]

      {"elixir", List.flatten(paths) ++ [script | args]}
    end

    defp losses(n) do
      {:ok, store} = Agent.start_link(fn -> [] end)

      statuses =
        Launcher.run(rank_command("examples/data_parallel.exs", []),
          n: n,
          env: [{"STEPS", "30"}],
          deadline: 240_000,
          output: fn rank, line -> Agent.update(store, &[{rank, line} | &1]) end
        )

      lines = Agent.get(store, & &1)
      Agent.stop(store)
      assert statuses == Map.new(0..(n - 1), &{&1, 0}), inspect(lines)

      for {rank, line} <- lines,
          [_, r, size, loss] <- [
            Regex.run(~r/^rank (\d+) of (\d+): .* after 30 steps: (\S+)$/, line)
          ] do
        assert {String.to_integer(r), String.to_integer(size)} == {rank, n}
        String.to_float(loss)
      end
    end

    @tag timeout: 600_000
    test "examples/data_parallel.exs: 2 and 4 ranks reach the loss of one rank on the whole batch" do
      [alone] = losses(1)
      # it trained: the loss of the initial parameters (all 0) is above 10
      assert alone < 0.1

      for n <- [2, 4] do
        got = losses(n)
        assert length(got) == n

        for loss <- got do
          assert_in_delta loss,
                          alone,
                          1.0e-5 * alone,
                          "#{n} ranks: #{inspect(got)}, one rank: #{alone}"
        end
      end
    end
  end
end
