# bench/defn.exs's defn programs on the GPU (bench/gpu/README.md): each
# through ExMLX.Compiler and Nx.Defn.Evaluator on ExMLX.Backend (the default
# device, :gpu there), beside Python mlx plain and with mx.compile on the
# same CUDA libmlx (bench/defn_reference.py --gpu, whose JSON output
# PY_JSON holds). Writes a Markdown table to OUT.
#
#   elixir -pa ... bench/gpu/defn.exs OUT PY_JSON     (Elixir >= 1.18: JSON)

[out, py_json] = System.argv()
{:ok, _} = Application.ensure_all_started(:ex_mlx)
Code.require_file("bench/defn.exs")
py = py_json |> File.read!() |> String.split("\n", trim: true) |> List.last() |> JSON.decode!()

# calls timed back to back after one collection, as bench/suite.exs's defn
# section and the Python reference time theirs
timed = fn fun, reps ->
  fun.()
  fun.()
  :erlang.garbage_collect()

  samples =
    for _ <- 1..reps do
      started = System.monotonic_time(:nanosecond)
      fun.()
      (System.monotonic_time(:nanosecond) - started) / 1.0e9
    end
    |> Enum.sort()

  %{median: Enum.at(samples, div(length(samples), 2))}
end

# About a second of matrix products before the first timed row, as
# defn_reference.py --gpu does, so that no row starts on an idle GPU.
warm = ExMLX.full(1.0, {:f, 32}, {2048, 2048}) |> ExMLX.eval()
Bench.Defn.warm_up(fn -> ExMLX.matmul(warm, warm) |> ExMLX.eval() end, 1000)

quick = System.get_env("BENCH_QUICK") == "1"
section = Bench.Defn.section(if(quick, do: 2, else: 20), quick, py, timed, random: false)

table = [
  "## #{section.title}, on #{ExMLX.default_device()}\n\n",
  "| | " <> Enum.join(section.columns, " | ") <> " |\n",
  "|---|" <> String.duplicate("---:|", length(section.columns)) <> "\n",
  Enum.map(section.rows, &("| " <> Enum.join(&1, " | ") <> " |\n")),
  "\n",
  section.notes,
  "\n"
]

File.write!(out, table)
IO.puts(table)
