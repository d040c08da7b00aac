# The benchmark suite (run through bin/bench): ExMLX beside Python mlx (the
# same libmlx build), numpy (OpenBLAS) and memcpy, measured in one run.
# `--quick` shrinks sizes and repetitions (CI uses it so the scripts cannot
# rot; it asserts nothing about speed). A full run writes
# bench/results/latest.md and latest.json; a quick one writes
# _build/bench/latest-quick.md and latest-quick.json, so that it never
# replaces the committed results. Both print the Markdown.

Code.require_file("json.exs", __DIR__)
Code.require_file("long_schedule.exs", __DIR__)
Code.require_file("distributed_section.exs", __DIR__)

defmodule Bench.Suite do
  @mb 1024 * 1024

  def main(args) do
    quick = "--quick" in args
    # Every row here is the CPU's, beside CPU references (Python mlx on its
    # CPU device, numpy): on a machine with a GPU, ExMLX's default device
    # would be the GPU. The GPU's rows are bench/gpu's (bin/bench runs them
    # where there is a GPU).
    Application.put_env(:ex_mlx, :default_device, :cpu)
    cfg = config(quick)
    # versions, and the dispatch figures the Nx section compares with
    python = python_reference(quick, ["--dispatch-only"])

    all = [
      dispatch: fn -> dispatch(cfg, python) end,
      under_load: fn -> under_load(cfg) end,
      matmul: fn -> matmul(cfg, python) end,
      transfers: fn -> transfers(cfg) end,
      fairness: fn -> fairness(cfg) end,
      nx: fn -> nx_section(cfg, python) end,
      defn: fn -> defn_section(cfg, quick) end,
      distributed: fn -> Bench.DistributedSection.section(quick) end
    ]

    case only(args, Keyword.keys(all)) do
      nil ->
        sections = Enum.map(all, fn {_name, section} -> section.() end)
        write(sections, quick, python)

      name ->
        # one section, printed only: bench/results keeps the last full run
        IO.puts(render([Keyword.fetch!(all, name).()], quick, python))
    end
  end

  # `--only NAME`: one section (a name of `main`'s list).
  defp only(args, names) do
    case Enum.drop_while(args, &(&1 != "--only")) do
      ["--only", name | _] ->
        Enum.find(names, &(Atom.to_string(&1) == name)) ||
          raise ArgumentError, "--only takes one of #{Enum.join(names, ", ")}, got: #{name}"

      ["--only"] ->
        raise ArgumentError, "--only takes a section name"

      [] ->
        nil
    end
  end

  defp write(sections, quick, python) do
    markdown = render(sections, quick, python)

    json =
      Bench.JSON.encode(%{
        quick: quick,
        sections: Enum.map(sections, &Map.delete(&1, :notes)),
        python: python
      })

    base = results_base(quick)
    File.mkdir_p!(Path.dirname(base))
    File.write!(base <> ".md", markdown)
    File.write!(base <> ".json", json)
    IO.puts(markdown)
    IO.puts(json)
    IO.puts("==> written to #{base}.md and #{base}.json")
  end

  # Where a run's results go, without the extension: a quick run's figures
  # claim nothing, so they stay out of bench/results, which is committed.
  defp results_base(false), do: "bench/results/latest"

  defp results_base(true),
    do: Path.join([Path.dirname(Mix.Project.build_path()), "bench", "latest-quick"])

  @kb 1024

  defp config(true),
    do: %{
      reps: 5,
      graph: 200,
      rounds: 1,
      sizes: [256, 512],
      bytes: [4 * @kb, 1 * @mb],
      load: {16, 100}
    }

  defp config(false),
    do: %{
      reps: 15,
      graph: 1000,
      rounds: 5,
      sizes: [512, 1024, 2048],
      bytes: [4 * @kb, 64 * @kb, 1 * @mb, 64 * @mb],
      load: {64, 500}
    }

  # -- measurement ------------------------------------------------------------

  # Seconds per call of `fun`: `reps` samples, each the mean of `inner`
  # back-to-back calls (so calls far below the clock's resolution still
  # measure), after a garbage collection before each sample (`collect:
  # :each`) or once before them all (`:once`).
  defp timed(fun, reps, inner \\ 1, collect \\ :each) do
    fun.()
    fun.()
    if collect == :once, do: :erlang.garbage_collect()

    for _ <- 1..reps do
      if collect == :each, do: :erlang.garbage_collect()
      started = System.monotonic_time(:nanosecond)
      for _ <- 1..inner//1, do: fun.()
      (System.monotonic_time(:nanosecond) - started) / inner / 1.0e9
    end
    |> summarize()
  end

  # Seconds per call of `fun`, `reps` calls timed one by one back to back
  # after one garbage collection, as the Python references time theirs (the
  # defn section). A collection before each call, as timed/3 does, lets
  # ExMLX's worker go to sleep meanwhile, so each call then pays its
  # wake-up, which Python's calls never do (bench/README.md, "How defn rows
  # are timed").
  defp timed_back_to_back(fun, reps), do: timed(fun, reps, 1, :once)

  defp summarize(samples) do
    samples = Enum.sort(samples)
    n = length(samples)

    %{
      median: Enum.at(samples, div(n, 2)),
      p10: Enum.at(samples, max(0, trunc(0.1 * n))),
      p90: Enum.at(samples, min(n - 1, trunc(0.9 * n)))
    }
  end

  defp python_reference(quick, extra, script \\ "bench/python_reference.py") do
    with {:ok, dir} <- ExMLX.Build.bench_python(),
         {out, 0} <-
           System.cmd(
             "python3",
             [script | if(quick, do: ["--quick"], else: [])] ++ extra,
             env: [{"PYTHONPATH", dir}],
             stderr_to_stdout: true
           ),
         {:ok, parsed} <- Bench.JSON.decode(out |> String.split("\n", trim: true) |> List.last()) do
      parsed
    else
      other -> %{"error" => inspect(other)}
    end
  end

  # -- sections ------------------------------------------------------------------

  # The host is shared and its speed drifts from second to second, so the
  # dispatch figures are taken in rounds: Python mlx (a fresh process timing
  # only these cases), then ExMLX, `rounds` times. Each side reports the
  # median of its per-round medians; the ratio is the median of the
  # per-round ratios, each from measurements seconds apart.
  defp dispatch(%{reps: reps, graph: graph, rounds: rounds}, _py) do
    one = ExMLX.full(1.0, {:f, 32}, {}) |> ExMLX.eval()
    eager_n = div(graph, 10)

    cases = [
      {"lazy op (graph of #{graph} adds + one eval), µs/op", "lazy_graph_s_per_op", graph,
       fn -> Enum.reduce(1..graph, one, fn _, acc -> ExMLX.add(acc, one) end) |> ExMLX.eval() end},
      {"lazy op, graph building only, µs/op", "lazy_build_s_per_op", graph,
       fn -> Enum.reduce(1..graph, one, fn _, acc -> ExMLX.add(acc, one) end) end},
      {"eager op (add + item: one round trip), µs/op", "eager_s_per_op", eager_n,
       fn -> for _ <- 1..eager_n, do: ExMLX.add(one, one) |> ExMLX.item() end},
      # The floor of the first row in this VM: the same graph built and
      # evaluated by Rust on ExMLX's worker thread, no Elixir per op.
      {"lazy op floor: the same graph built by Rust on the worker, µs/op", "lazy_graph_s_per_op",
       graph,
       {:samples,
        fn ->
          ExMLX.Call.run(&ExMLX.Native.worker_chain_seconds(&1, :cpu, graph, 0, reps))
          |> Enum.map(&elem(&1, 1))
        end}}
    ]

    per_round =
      for _ <- 1..rounds do
        py = python_reference(reps == 5, ["--dispatch-only"])

        for {_label, key, n, fun} <- cases do
          ours =
            case fun do
              {:samples, run} -> summarize(run.()).median / n * 1.0e6
              fun -> timed(fun, reps).median / n * 1.0e6
            end

          theirs = scale(get_in(py, [key, "median"]), 1.0e6)
          {ours, theirs}
        end
      end

    rows =
      for {{label, _, _, _}, i} <- Enum.with_index(cases) do
        pairs = Enum.map(per_round, &Enum.at(&1, i))
        ours = median(Enum.map(pairs, &elem(&1, 0)))

        case Enum.reject(pairs, fn {_, theirs} -> is_nil(theirs) end) do
          [] ->
            row(label, ours, nil)

          valid ->
            theirs = median(Enum.map(valid, &elem(&1, 1)))
            ratio = median(Enum.map(valid, fn {o, t} -> o / t end))
            [label, fmt(ours), fmt(theirs), fmt_ratio(ratio)]
        end
      end

    %{
      title:
        "Op dispatch (lower is better; ratio = ExMLX / Python mlx, median over " <>
          "#{rounds} alternating round(s))",
      columns: ["ExMLX", "Python mlx", "ratio"],
      rows: rows,
      notes:
        "On the CPU an add of computed float32 tensors is computed at once on the calling " <>
          "thread (README, \"Threads\"; ex_mlx_core::ops::computed): the ExMLX rows add " <>
          "without building a graph, and \"graph building only\" computes. The floor row " <>
          "builds and evaluates MLX's graph on the worker, as Python mlx does."
    }
  end

  defp median([]), do: nil

  defp median(values) do
    sorted = Enum.sort(values)
    Enum.at(sorted, div(length(sorted), 2))
  end

  # Alternating rounds too (see dispatch/2): Python mlx and numpy in a fresh
  # process, then ExMLX, `rounds` times; the ratio is the median of the
  # per-round ExMLX / numpy ratios.
  defp matmul(%{reps: reps, sizes: sizes, rounds: rounds}, _py) do
    inputs =
      Map.new(sizes, fn n ->
        a =
          ExMLX.iota({:f, 32}, {n, n})
          |> ExMLX.multiply(ExMLX.full(1.0e-6, {:f, 32}, {}))
          |> ExMLX.eval()

        {n, a}
      end)

    per_round =
      for _ <- 1..rounds do
        py = python_reference(reps == 5, ["--matmul-only"])

        for n <- sizes do
          a = inputs[n]
          t = timed(fn -> ExMLX.matmul(a, a) |> ExMLX.eval() end, reps)

          {2 * n * n * n / t.median / 1.0e9, get_in(py, ["mlx_matmul_gflops", "#{n}"]),
           get_in(py, ["numpy_matmul_gflops", "#{n}"])}
        end
      end

    rows =
      for {n, i} <- Enum.with_index(sizes) do
        triples = Enum.map(per_round, &Enum.at(&1, i))
        ours = median(Enum.map(triples, &elem(&1, 0)))
        mlx = triples |> Enum.map(&elem(&1, 1)) |> Enum.reject(&is_nil/1) |> median()
        with_np = Enum.reject(triples, fn {_, _, np} -> is_nil(np) end)

        ratio =
          case with_np do
            [] -> "—"
            _ -> median(Enum.map(with_np, fn {o, _, np} -> o / np end)) |> fmt_ratio()
          end

        np = with_np |> Enum.map(&elem(&1, 2)) |> median()
        ["f32 #{n}²", fmt(ours), fmt(mlx), fmt(np), ratio]
      end

    %{
      title:
        "Matmul, GFLOPS (higher is better; ratio = ExMLX / numpy, median over " <>
          "#{rounds} alternating round(s))",
      columns: ["ExMLX", "Python mlx", "numpy", "ratio"],
      rows: rows
    }
  end

  defp fmt_ratio(r), do: :erlang.float_to_binary(r, decimals: 2) <> "×"

  defp transfers(%{reps: reps, bytes: sizes}) do
    rows =
      for bytes <- sizes, {name, fun} <- transfer_cases(bytes) do
        data = :binary.copy(<<0::size(bytes * 8)>>)
        # the references, measured next to each case: a plain copy in Rust
        # into a warm buffer, and the BEAM's copy into a new binary
        memcpy = ExMLX.Native.memcpy_seconds(data, reps) |> summarize()
        # below 1 MB, many calls per sample (1 MB moved per sample); the
        # tensors they make are freed by the garbage collection before the
        # next sample, so MLX reuses their buffers as memcpy reuses its one
        inner = max(1, div(@mb, bytes))
        beam_copy = timed(fn -> :binary.copy(data) end, reps, inner)
        t = timed(fun, reps, inner)
        gbps = fn s -> bytes / s / 1.0e9 end

        [
          "#{name} #{format_size(bytes)}",
          fmt(gbps.(t.median)),
          fmt(gbps.(memcpy.median)),
          fmt(gbps.(beam_copy.median)),
          ratio(memcpy.median, t.median)
        ]
      end

    %{
      title:
        "Transfers, GB/s (ratio = ExMLX / memcpy of the same bytes, timed in Rust in this run)",
      columns: ["ExMLX", "memcpy (Rust)", ":binary.copy/1", "ratio"],
      rows: rows
    }
  end

  defp format_size(bytes) when bytes >= @mb, do: "#{div(bytes, @mb)} MB"
  defp format_size(bytes), do: "#{div(bytes, @kb)} KB"

  defp transfer_cases(bytes) do
    n = div(bytes, 4)
    tensor = ExMLX.iota({:f, 32}, {n}) |> ExMLX.eval()
    data = ExMLX.to_binary(tensor)
    frame = ExMLX.Wire.encode(tensor)

    [
      {"from_binary", fn -> ExMLX.from_binary(data, {:f, 32}, {n}) |> ExMLX.eval() end},
      # (an evaluated CPU tensor's bytes come back without a copy: this row
      # times handing over a binary that refers to MLX's buffer)
      {"to_binary (no copy)", fn -> ExMLX.to_binary(tensor) end},
      {"wire encode", fn -> ExMLX.Wire.encode(tensor) end},
      {"wire decode", fn -> ExMLX.Wire.decode!(frame) end}
    ]
  end

  # Scheduler fairness under NIF load: a process asking to wake every 10 ms
  # on the normal schedulers, while `processes` × `ops` mixed ExMLX calls
  # run (the reliability suite's load, test/reliability/load_test.exs),
  # beside the same ticker while as many processes run pure-Elixir work for
  # as long. The ratio compares the longest gaps: how much worse the NIF
  # load is for other processes than an equal Elixir load.
  @tick_ms 10

  # Small eager calls and a compiled call quiet, with one core busy and
  # with every core busy (one `yes > /dev/null` per core, started and
  # stopped here), each beside Python mlx under the same load: for each
  # load, in each round, Python mlx (bench/load_reference.py, a fresh
  # process) then ExMLX. Each side times phases of back-to-back
  # iterations; a figure is the median of the phases' mean times, then the
  # median over rounds; the ratio is the median of the per-round ratios.
  defp under_load(%{rounds: rounds, reps: reps}) do
    quick = reps == 5
    {iterations, count} = if quick, do: {50, 3}, else: {300, 5}
    cores = System.schedulers_online()
    loads = [{"quiet", 0}, {"one core busy", 1}, {"every core busy (#{cores})", cores}]
    cases = load_cases()

    measured =
      for {label, burners} <- loads do
        per_round =
          for _ <- 1..rounds do
            with_burners(burners, fn ->
              python = python_reference(quick, [], "bench/load_reference.py")

              for {name, _title, step} <- cases,
                  into: %{},
                  do: {name, {phases(step, iterations, count), python[name]}}
            end)
          end

        {label, per_round}
      end

    rows =
      for {name, title, _step} <- cases, {label, per_round} <- measured do
        pairs = Enum.map(per_round, & &1[name])
        ours = median(Enum.map(pairs, &elem(&1, 0)))
        valid = Enum.filter(pairs, fn {_, theirs} -> is_number(theirs) end)

        [
          "#{title}, #{label}",
          fmt(ours),
          fmt(median(Enum.map(valid, &elem(&1, 1)))),
          if(valid == [],
            do: "—",
            else: fmt_ratio(median(Enum.map(valid, fn {o, t} -> o / t end)))
          )
        ]
      end

    %{
      title:
        "Small calls under load (µs an iteration; ratio = ExMLX / Python mlx, median over #{rounds} round(s))",
      columns: ["ExMLX", "Python mlx", "ratio"],
      rows: rows
    }
  end

  # `{name, title, step}`: the same calls as bench/load_reference.py's (the
  # Nx ones where Nx is loaded).
  defp load_cases do
    one = ExMLX.full(1.0, {:f, 32}, {}) |> ExMLX.eval()
    base = ExMLX.iota({:s, 32}, {16}) |> ExMLX.eval()

    eager = [
      {"add_item", "add + item (f32 scalar)", fn _ -> ExMLX.add(one, one) |> ExMLX.item() end},
      {"loop", "iota(16) + full(i), eval",
       fn i -> base |> ExMLX.add(ExMLX.full(i + 1, {:s, 32}, {})) |> ExMLX.eval() end}
    ]

    if Code.ensure_loaded?(Nx) do
      nx = Nx
      a = nx.iota({16}, type: :f32, backend: ExMLX.Backend)
      b = nx.iota({16}, type: :f32, backend: ExMLX.Backend)
      f = fn x -> x |> nx.exp() |> nx.multiply(2) |> nx.sum() end
      defn = Nx.Defn
      compiled = defn.jit(f, compiler: ExMLX.Compiler)

      eager ++
        [
          {"add_sum_item", "Nx add + sum + to_number (16 f32)",
           fn _ -> a |> nx.add(b) |> nx.sum() |> nx.to_number() end},
          {"compiled_call", "compiled sum(exp(x) · 2) + to_number (16 f32)",
           fn _ -> compiled.(a) |> nx.to_number() end},
          # the same call beside Python mlx without `mx.compile` (its exp and
          # multiply unfused, as in this program: `:fuse` is off)
          {"compiled_call_uncompiled", "the same, beside Python mlx without mx.compile",
           fn _ -> compiled.(a) |> nx.to_number() end}
        ]
    else
      eager
    end
  end

  # The median over `count` phases of the mean seconds, in µs, an iteration
  # of `step` took (`iterations` back to back in a phase), after one phase
  # of warm-up.
  defp phases(step, iterations, count) do
    for i <- 1..iterations, do: step.(i)

    for _ <- 1..count do
      started = System.monotonic_time(:nanosecond)
      for i <- 1..iterations, do: step.(i)
      (System.monotonic_time(:nanosecond) - started) / iterations / 1.0e3
    end
    |> median()
  end

  # Runs `fun` while `count` OS processes of ours keep a core busy each:
  # `yes`, started in the background by a shell (which prints its PID),
  # killed by that PID afterwards, and bounded by `timeout` should this VM
  # die first.
  defp with_burners(0, fun), do: fun.()

  defp with_burners(count, fun) do
    pids =
      for _ <- 1..count do
        ~c"timeout 600 yes > /dev/null 2>&1 & echo $!"
        |> :os.cmd()
        |> to_string()
        |> String.trim()
      end

    try do
      Process.sleep(100)
      fun.()
    after
      System.cmd("kill", pids)
    end
  end

  defp with_busy_core(fun), do: with_burners(1, fun)

  defp fairness(%{load: {processes, ops}}) do
    shared = ExMLX.iota({:f, 32}, {16}) |> ExMLX.eval()

    nif_load = fn ->
      1..processes
      |> Enum.map(fn p -> Task.async(fn -> mixed_ops(p, ops, shared) end) end)
      |> Task.await_many(:infinity)
    end

    {nif_ms, nif_ticks} = with_ticker(nif_load)

    elixir_load = fn ->
      deadline = System.monotonic_time(:millisecond) + nif_ms

      1..processes
      |> Enum.map(fn _ -> Task.async(fn -> spin_until(deadline) end) end)
      |> Task.await_many(:infinity)
    end

    {elixir_ms, elixir_ticks} = with_ticker(elixir_load)
    idle = fn -> Process.sleep(nif_ms) end
    {idle_ms, idle_ticks} = with_ticker(idle)

    row = fn label, ms, {ticks, missed, gap} ->
      [label, "#{ms}", "#{ticks}", "#{missed}", "#{gap}"]
    end

    {_, _, nif_gap} = nif_ticks
    {_, _, elixir_gap} = elixir_ticks

    %{
      title:
        "Scheduler fairness: a #{@tick_ms} ms ticker on the normal schedulers " <>
          "(longest gap, ms; lower is better)",
      columns: ["run, ms", "ticks", "missed", "longest gap"],
      rows: [
        row.("during #{processes} processes × #{ops} mixed ExMLX calls", nif_ms, nif_ticks),
        row.("during #{processes} processes of pure-Elixir work", elixir_ms, elixir_ticks),
        row.("idle", idle_ms, idle_ticks)
      ],
      notes:
        "Longest gap under the NIF load / under the Elixir load: " <>
          ratio(nif_gap * 1.0, max(elixir_gap, 1) * 1.0) <>
          " (a gap of k intervals counts k - 1 missed ticks)."
    }
  end

  defp mixed_ops(p, ops, shared) do
    private = ExMLX.full(p * 0.25, {:f, 32}, {16})

    for i <- 1..ops do
      case rem(i + p, 5) do
        0 -> ExMLX.add(shared, private) |> ExMLX.sum() |> ExMLX.item()
        1 -> ExMLX.matmul(ExMLX.reshape(shared, {4, 4}), ExMLX.reshape(private, {4, 4}))
        2 -> ExMLX.from_binary(ExMLX.to_binary(shared), {:f, 32}, {16}) |> ExMLX.to_binary()
        3 -> private |> ExMLX.Wire.encode() |> ExMLX.Wire.decode!() |> ExMLX.sum() |> ExMLX.item()
        4 -> ExMLX.sort(private) |> ExMLX.to_binary()
      end
    end
  end

  defp spin_until(deadline) do
    if System.monotonic_time(:millisecond) < deadline do
      Enum.sum(1..1000)
      spin_until(deadline)
    end
  end

  defp with_ticker(load) do
    parent = self()
    started = System.monotonic_time(:millisecond)
    ticker = spawn_link(fn -> tick(parent, started, {0, 0, 0}) end)
    load.()
    elapsed = System.monotonic_time(:millisecond) - started
    send(ticker, :stop)

    receive do
      {:ticks, counts} -> {elapsed, counts}
    end
  end

  defp tick(parent, last, {ticks, missed, gap} = counts) do
    receive do
      :stop -> send(parent, {:ticks, counts})
    after
      @tick_ms ->
        now = System.monotonic_time(:millisecond)
        g = now - last
        tick(parent, now, {ticks + 1, missed + max(div(g, @tick_ms) - 1, 0), max(gap, g)})
    end
  end

  defp nx_section(%{reps: reps, graph: graph}, py) do
    if Code.ensure_loaded?(Nx) do
      nx_rows(reps, graph, py)
    else
      %{
        title: "With Nx",
        columns: [],
        rows: [],
        notes: "skipped: Nx is not available (set NX_PATH or install Hex)"
      }
    end
  end

  defp nx_rows(reps, graph, py) do
    # Through variables, so this script compiles where Nx is absent.
    nx = Nx
    random = Nx.Random
    key = random.key(1)
    {w1, key} = random.normal(key, 0.0, 0.05, shape: {784, 512})
    {w2, key} = random.normal(key, 0.0, 0.05, shape: {512, 10})
    {x, _} = random.uniform(key, shape: {64, 784})

    mlp = fn x, w1, w2 -> x |> nx.dot(w1) |> nx.max(0) |> nx.dot(w2) |> nx.to_binary() end

    softmax = fn x ->
      e = nx.exp(nx.subtract(x, nx.reduce_max(x, axes: [1], keep_axes: true)))
      nx.divide(e, nx.sum(e, axes: [1], keep_axes: true)) |> nx.to_binary()
    end

    on = fn backend -> Enum.map([x, w1, w2], &nx.backend_copy(&1, backend)) end
    [xm, w1m, w2m] = on.(ExMLX.Backend)
    [xb, w1b, w2b] = on.(Nx.BinaryBackend)
    mlx_mlp = timed(fn -> mlp.(xm, w1m, w2m) end, reps)
    bin_mlp = timed(fn -> mlp.(xb, w1b, w2b) end, max(2, div(reps, 5)))
    mlx_sm = timed(fn -> softmax.(xm) end, reps)
    bin_sm = timed(fn -> softmax.(xb) end, max(2, div(reps, 5)))

    # The same MLP through defn: ExMLX.Compiler (one program per call) and
    # Nx.Defn.Evaluator (one backend call per node), both on ExMLX.Backend.
    Code.require_file("bench/defn.exs")
    defn = Nx.Defn
    forward = fn x, w1, w2 -> x |> nx.dot(w1) |> nx.max(0) |> nx.dot(w2) end
    compiled = defn.jit(forward, compiler: ExMLX.Compiler)
    evaluated = defn.jit(forward, compiler: Nx.Defn.Evaluator)
    x1 = nx.slice(xm, [0, 0], [1, 784])

    jit_rows =
      for {label, input} <- [{"batch 1", x1}, {"batch 64", xm}] do
        # (calls back to back after the defn section's warm-up, as it times
        # them: the first tens of calls after an idle spell run at half
        # speed or worse on this project's VM: bench/README.md, "How defn
        # rows are timed")
        run = fn f ->
          call = fn -> f.(input, w1m, w2m) |> nx.to_binary() end
          unless reps == 5, do: apply(Bench.Defn, :warm_up, [call, 200])
          timed_back_to_back(call, reps)
        end

        {c, e} = {run.(compiled), run.(evaluated)}

        [
          "defn MLP forward #{label}: ExMLX.Compiler vs Nx.Defn.Evaluator, µs",
          fmt(c.median * 1.0e6),
          fmt(e.median * 1.0e6),
          ratio(e.median, c.median)
        ]
      end

    one = nx.tensor(1.0, backend: ExMLX.Backend)
    chain = fn -> Enum.reduce(1..graph, one, fn _, acc -> nx.add(acc, one) end) end
    lazy = timed(fn -> chain.() |> nx.to_binary() end, reps)
    build = timed(chain, reps)
    py_lazy = get_in(py, ["lazy_graph_s_per_op", "median"])
    py_build = get_in(py, ["lazy_build_s_per_op", "median"])

    # The eager round trip through Nx (no compiler), quiet and with a core
    # busy, beside Nx.BinaryBackend under the same conditions.
    a16 = nx.iota({16}, type: :f32)

    eager_nx = fn backend ->
      [a, b] = [nx.backend_copy(a16, backend), nx.backend_copy(a16, backend)]
      calls = 500

      t =
        timed(fn -> for _ <- 1..calls, do: a |> nx.add(b) |> nx.sum() |> nx.to_number() end, reps)

      t.median / calls * 1.0e6
    end

    eager_rows =
      for {label, run} <- [
            {"quiet", fn f -> f.() end},
            {"one core busy (yes > /dev/null)", &with_busy_core/1}
          ] do
        {ours, theirs} = run.(fn -> {eager_nx.(ExMLX.Backend), eager_nx.(Nx.BinaryBackend)} end)

        [
          "Nx.add + Nx.sum + Nx.to_number (16 f32, no compiler), #{label}, µs",
          fmt(ours),
          fmt(theirs),
          ratio(theirs, ours)
        ]
      end

    rows =
      [
        row(
          "Nx.add lazy op (graph of #{graph} + read), µs/op, vs Python mlx",
          lazy.median / graph * 1.0e6,
          scale(py_lazy, 1.0e6)
        ),
        row(
          "Nx.add graph building only, µs/op, vs Python mlx",
          build.median / graph * 1.0e6,
          scale(py_build, 1.0e6)
        ),
        [
          "MLP forward 64×784→512→10, ms",
          fmt(mlx_mlp.median * 1000),
          fmt(bin_mlp.median * 1000),
          ratio(bin_mlp.median, mlx_mlp.median)
        ],
        [
          "softmax 64×784, ms",
          fmt(mlx_sm.median * 1000),
          fmt(bin_sm.median * 1000),
          ratio(bin_sm.median, mlx_sm.median)
        ]
      ] ++ eager_rows ++ jit_rows

    %{
      title:
        "With Nx (first two rows: ratio = ExMLX / Python mlx; then speed-up = BinaryBackend / ExMLX; " <>
          "defn rows: speed-up = Evaluator / ExMLX.Compiler, both on ExMLX.Backend)",
      columns: ["ExMLX.Backend", "reference", "ratio"],
      rows: rows
    }
  end

  # defn programs (bench/defn.exs) beside bench/defn_reference.py's, which
  # runs beside the VM (--serve) so that each row alternates between the two
  # (as many rounds as the other sections: 5; 1 with --quick).
  defp defn_section(%{reps: reps, rounds: rounds}, quick) do
    Code.require_file("bench/defn.exs")

    if Code.ensure_loaded?(Bench.Defn) do
      {section, long} =
        Bench.LongSchedule.around(fn ->
          with_defn_reference(quick, fn py ->
            apply(Bench.Defn, :section, [reps, quick, py, &timed_back_to_back/2, [rounds: rounds]])
          end)
        end)

      Map.update(section, :notes, Bench.LongSchedule.note(long), fn notes ->
        (notes || "") <> "\n\n" <> Bench.LongSchedule.note(long)
      end)
    else
      %{
        title: "defn programs",
        columns: [],
        rows: [],
        notes: "skipped: Nx is not available (set NX_PATH or install Hex)"
      }
    end
  end

  # Runs `fun` with a function that times one of bench/defn_reference.py's
  # programs on request, `(name, variant, reps, warm_up_ms) -> seconds |
  # nil`, answered by that script in --serve mode in a port; nil where
  # Python mlx is not available, the script failed or the program has no such
  # variant (the row then shows "—").
  defp with_defn_reference(quick, fun) do
    python = System.find_executable("python3")

    port =
      with {:ok, dir} <- ExMLX.Build.bench_python(),
           true <- is_binary(python) do
        args = ["bench/defn_reference.py", "--serve"] ++ if(quick, do: ["--quick"], else: [])

        port =
          Port.open({:spawn_executable, python}, [
            :binary,
            :exit_status,
            {:line, 65_536},
            args: args,
            env: [{~c"PYTHONPATH", String.to_charlist(dir)}]
          ])

        case port_reply(port) do
          %{"ready" => true} -> port
          _ -> nil
        end
      else
        _ -> nil
      end

    time = fn name, variant, reps, warm_ms ->
      if port do
        Port.command(port, "#{name} #{variant} #{reps} #{warm_ms}\n")

        case port_reply(port) do
          %{"median" => seconds} -> seconds
          _ -> nil
        end
      end
    end

    try do
      fun.(time)
    after
      if port && Port.info(port) do
        Port.command(port, "quit\n")
        Port.close(port)
      end
    end
  end

  # The next line of JSON from the reference's port (nil if it exited or
  # took more than two minutes).
  defp port_reply(port) do
    receive do
      {^port, {:data, {:eol, line}}} ->
        case Bench.JSON.decode(line) do
          {:ok, value} -> value
          {:error, _} -> nil
        end

      {^port, {:exit_status, _}} ->
        nil
    after
      120_000 -> nil
    end
  end

  # -- formatting ---------------------------------------------------------------

  defp row(label, ours, theirs), do: [label, fmt(ours), fmt(theirs), ratio(ours, theirs)]
  defp scale(nil, _), do: nil
  defp scale(x, k), do: x * k
  defp fmt(nil), do: "—"
  defp fmt(x) when is_float(x) and x >= 100, do: :erlang.float_to_binary(x, decimals: 0)
  defp fmt(x) when is_float(x), do: :erlang.float_to_binary(x, decimals: 2)
  defp fmt(x), do: to_string(x)
  defp ratio(_, nil), do: "—"
  defp ratio(nil, _), do: "—"
  defp ratio(a, b), do: :erlang.float_to_binary(a / b, decimals: 2) <> "×"

  defp render(sections, quick, python) do
    header = """
    # ExMLX benchmarks#{if quick, do: " (quick mode: small sizes, not for claims)", else: ""}

    Measured #{DateTime.utc_now() |> DateTime.truncate(:second)} on #{:erlang.system_info(:logical_processors)} cores; \
    medians. Python mlx #{python["mlx"] || "unavailable"}, numpy #{python["numpy"] || "unavailable"}.
    """

    body =
      for %{title: title, columns: columns, rows: rows} = s <- sections do
        table =
          if rows == [] do
            ""
          else
            head = "| | " <> Enum.join(columns, " | ") <> " |\n"
            rule = "|---|" <> Enum.map_join(columns, "", fn _ -> "---:|" end) <> "\n"

            head <>
              rule <> Enum.map_join(rows, "", fn r -> "| " <> Enum.join(r, " | ") <> " |\n" end)
          end

        "\n## #{title}\n\n" <> table <> if(s[:notes], do: "\n#{s.notes}\n", else: "")
      end

    header <> Enum.join(body)
  end
end

Bench.Suite.main(System.argv())
