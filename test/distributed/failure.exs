# One rank of the bounded-failure tests of test/ex_mlx/distributed_test.exs.
# EX_MLX_TEST_MODE says which failure:
#
#   * "missing" - only rank 0 of two is started: init cannot complete
#   * "killed"  - rank 1 kills itself (SIGKILL) after 3 collectives
#   * "stopped" - rank 1 stops itself (SIGSTOP) after 3 collectives: alive,
#                 its sockets open, but it never joins the next collective
#
# Rank 0 prints "OUTCOME <kind> <message>" for the error it got, then the
# outcome of one more call ("AFTER ..."), and exits with status 3.
alias ExMLX.Distributed, as: D

mode = System.fetch_env!("EX_MLX_TEST_MODE")
timeout = String.to_integer(System.fetch_env!("EX_MLX_TEST_TIMEOUT"))
x = ExMLX.full(1.0, {:f, 32}, {262_144})

outcome = fn fun ->
  try do
    fun.()
    "ok"
  rescue
    e in ExMLX.Error -> "#{e.kind} #{e.message}"
  end
end

first =
  outcome.(fn ->
    g = D.init(backend: :ring, strict: true, timeout: timeout)
    IO.puts("JOINED #{g.rank}")

    if g.rank == 1 do
      for _ <- 1..3, do: D.all_sum(x) |> ExMLX.eval()
      signal = if mode == "killed", do: "-KILL", else: "-STOP"
      System.cmd("kill", [signal, System.pid()])
      Process.sleep(:infinity)
    else
      for _ <- 1..100_000, do: D.all_sum(x) |> ExMLX.eval()
    end
  end)

IO.puts("OUTCOME #{first}")
IO.puts("AFTER #{outcome.(fn -> D.all_sum(x) end)}")
System.halt(3)
