# Data-parallel training across GPUs against one GPU (bench/gpu/README.md;
# issue: NCCL collectives on several GPUs):
#
#   bench/gpu/run.sh elixir bench/gpu/nccl_training.exs [N]
#
# runs examples/data_parallel.exs on :gpu alone (the group of one, the whole
# batch) and on N GPUs (default 2) with the NCCL backend (each rank a share
# of the batch, gradients averaged with all_sum), both printing the whole
# batch's loss after every step, and checks that the curves agree within
# f32 reduction-order tolerance (relative 1e-4 at every step). Exits 1 if not.
alias ExMLX.Distributed.Launcher

n =
  case System.argv() do
    [n] -> String.to_integer(n)
    [] -> 2
  end

example = Path.expand("../../examples/data_parallel.exs", __DIR__)

paths =
  for path <- :code.get_path(),
      path = to_string(path),
      String.contains?(path, "/lib/"),
      into: [],
      do: ["-pa", path]

args = List.flatten(paths) ++ [example]
env = [{"EXMLX_DEVICE", "gpu"}, {"CURVE", "1"}, {"STEPS", "40"}]

curve = fn lines ->
  for "CURVE " <> rest <- lines, into: %{} do
    [_size, step, loss] = String.split(rest)
    {String.to_integer(step), String.to_float(loss)}
  end
end

{alone, 0} = System.cmd("elixir", args, env: env, stderr_to_stdout: true)
alone = alone |> String.split("\n") |> curve.()

{:ok, store} = Agent.start_link(fn -> [] end)

statuses =
  Launcher.run({"elixir", args},
    n: n,
    backend: :nccl,
    env: env,
    deadline: 300_000,
    output: fn rank, line ->
      IO.puts("[#{rank}] #{line}")
      Agent.update(store, &[line | &1])
    end
  )

spread = Agent.get(store, & &1) |> curve.()

worst =
  for {step, loss} <- alone, reduce: 0.0 do
    acc -> max(acc, abs(loss - Map.get(spread, step, 1.0e30)) / abs(loss))
  end

for step <- [1, 10, 20, 40],
    do: IO.puts("step #{step}: one GPU #{alone[step]}, #{n} GPUs #{spread[step]}")

ok =
  map_size(alone) == 40 and map_size(spread) == 40 and worst <= 1.0e-4 and
    Enum.all?(Map.values(statuses), &(&1 == 0))

IO.puts(
  "#{if ok, do: "ok  ", else: "FAIL"} #{n} GPUs' loss curve within #{Float.round(worst, 9)} (relative) of one GPU's; exits #{inspect(statuses)}"
)

System.halt(if ok, do: 0, else: 1)
