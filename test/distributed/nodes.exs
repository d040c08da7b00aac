# The Erlang-distribution test of test/ex_mlx/distributed_test.exs: two BEAM
# nodes on this machine (the launcher's ranks 0 and 1), no MLX group. Each
# starts distribution itself (epmd on 127.0.0.1: ERL_EPMD_ADDRESS is set by
# the test). Rank 1 registers itself and waits for three tensors from
# rank 0. Both print what they sent or got as one "RESULT <base64 term>"
# line: per tensor its shape, type, device and bytes.
rank = String.to_integer(System.fetch_env!("MLX_RANK"))
{_, 0} = System.cmd("epmd", ["-daemon"])

# `epmd -daemon` returns before epmd listens (and when both ranks start one,
# one of them exits): wait until it answers, then start distribution
epmd_up? = fn -> match?({_, 0}, System.cmd("epmd", ["-names"], stderr_to_stdout: true)) end
true = Enum.any?(1..100, fn _ -> epmd_up?.() || (Process.sleep(100) && false) end)
{:ok, _} = Node.start(:"ex_mlx_rank#{rank}_#{System.fetch_env!("EX_MLX_TEST_RUN")}", :shortnames)
Node.set_cookie(:ex_mlx_test)
[_, host] = node() |> Atom.to_string() |> String.split("@")
peer = :"ex_mlx_rank1_#{System.fetch_env!("EX_MLX_TEST_RUN")}@#{host}"

describe = fn t -> {t.shape, t.type, t.device, ExMLX.to_binary(t)} end

got =
  if rank == 1 do
    Process.register(self(), :receiver)

    for tag <- [:a, :b, :c] do
      describe.(ExMLX.Distributed.receive_tensor(tag: tag, timeout: 60_000))
    end
  else
    # (rank 1 may still be starting: retry for up to a minute)
    ready? = fn ->
      Node.connect(peer) && is_pid(:rpc.call(peer, Process, :whereis, [:receiver]))
    end

    true = Enum.any?(1..120, fn _ -> ready?.() || (Process.sleep(500) && false) end)

    big = ExMLX.multiply(ExMLX.iota({:f, 32}, {512, 1024}), ExMLX.full(0.5, {:f, 32}, {}))
    sent = [ExMLX.iota({:s, 32}, {2, 3}), ExMLX.full(-0.0, {:bf, 16}, {2}), big]

    for {t, tag} <- Enum.zip(sent, [:a, :b, :c]) do
      :ok = ExMLX.Distributed.send_tensor({:receiver, peer}, t, tag)
      describe.(t)
    end
  end

IO.puts("RESULT " <> Base.encode64(:erlang.term_to_binary(got)))
# (rank 0 stays until rank 1 has what it sent: the connection closes with it)
if rank == 0, do: Process.sleep(3_000)
