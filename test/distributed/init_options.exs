# A rank of the init-options test (test/ex_mlx/distributed_test.exs): started
# without MLX_RANK or MLX_HOSTFILE, it gives ExMLX.Distributed.init/1 its rank
# and hostfile as options, joins the group and prints {rank, size, all_sum}.
rank = String.to_integer(System.fetch_env!("EX_MLX_INIT_RANK"))
hostfile = System.fetch_env!("EX_MLX_INIT_HOSTFILE")

g =
  ExMLX.Distributed.init(
    backend: :ring,
    strict: true,
    hostfile: hostfile,
    rank: rank,
    timeout: 60_000
  )

sum = ExMLX.full(g.rank + 1.0, {:f, 32}, {}, device: :cpu) |> ExMLX.Distributed.all_sum()
IO.puts("RESULT " <> Base.encode64(:erlang.term_to_binary({g.rank, g.size, ExMLX.item(sum)})))
