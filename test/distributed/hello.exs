# The script of the `mix ex_mlx.launch` test (test/ex_mlx/distributed_test.exs):
# joins the group and prints the all_sum of each rank's rank + 1.
g = ExMLX.Distributed.init(strict: true)
sum = ExMLX.full(g.rank + 1, {:s, 32}, {}) |> ExMLX.Distributed.all_sum() |> ExMLX.item()
IO.puts("rank #{g.rank} of #{g.size} (#{g.backend}): all_sum #{sum}")
