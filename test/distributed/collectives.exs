# One rank of test/ex_mlx/distributed_test.exs: joins the ring named by
# MLX_RANK and MLX_HOSTFILE, runs every collective on known inputs for
# {:f, 32}, {:s, 32} and {:bf, 16}, and prints what it got as one
# "RESULT <base64 of an Erlang term>" line. The test computes the
# expected values itself.
alias ExMLX.Distributed, as: D

g = D.init(backend: :ring, strict: true, timeout: 60_000)
right = rem(g.rank + 1, g.size)
left = rem(g.rank + g.size - 1, g.size)

# rank r's input, element i: (r + 1) * (i - 2) / 2 (halves: exact in bf16)
input = fn type ->
  values = for i <- 0..4, do: (g.rank + 1) * (i - 2) / 2
  values = if type == {:s, 32}, do: Enum.map(values, &round(&1 * 2)), else: values

  bytes =
    for v <- values, into: <<>> do
      case type do
        {:f, 32} -> <<v::float-32-little>>
        {:s, 32} -> <<v::signed-32-little>>
        # the top half of the f32 (exact for these values)
        {:bf, 16} -> binary_part(<<v::float-32-little>>, 2, 2)
      end
    end

  ExMLX.from_binary(bytes, type, {5})
end

results =
  for type <- [{:f, 32}, {:s, 32}, {:bf, 16}], into: %{} do
    x = input.(type)
    # every rank sends to its right and receives from its left (the ring's
    # neighbours); small messages fit the sockets' buffers, so sending first
    # does not wait for the receiver
    :ok = D.send(x, right)
    got = D.recv({5}, type, left)

    got_like =
      (
        :ok = D.send(x, left)
        D.recv_like(x, right)
      )

    {type,
     %{
       all_sum: ExMLX.to_list(D.all_sum(x)),
       all_max: ExMLX.to_list(D.all_max(x)),
       all_min: ExMLX.to_list(D.all_min(x)),
       all_gather: ExMLX.to_list(D.all_gather(x)),
       result_type: D.all_sum(x).type,
       recv: ExMLX.to_list(got),
       recv_like: ExMLX.to_list(got_like)
     }}
  end

# average_gradients over a nested container: w = rank + 1 everywhere,
# b = 2 * (rank + 1) in bf16, v = rank * i; in one buffer per type, and in
# buffers of at most 16 bytes (so several collectives)
grads = %{
  w: ExMLX.full(g.rank + 1, {:f, 32}, {3, 2}),
  layer: [
    ExMLX.full(2 * (g.rank + 1), {:bf, 16}, {4}),
    {ExMLX.multiply(ExMLX.iota({:f, 32}, {5}), ExMLX.full(g.rank, {:f, 32}, {}))}
  ]
}

averages =
  for batch_bytes <- [32 * 1024 * 1024, 16], into: %{} do
    %{w: w, layer: [b, {v}]} = D.average_gradients(grads, batch_bytes: batch_bytes)
    {batch_bytes, Enum.map([w, b, v], &{&1.shape, &1.type, ExMLX.to_list(&1)})}
  end

results = Map.put(results, :average_gradients, averages)

# MLX's ring cannot split a group; it says so
split =
  try do
    D.split(g, 0)
  rescue
    e in ExMLX.Error -> {e.kind, e.message}
  end

results = Map.put(results, :split, split)

IO.puts("RESULT " <> Base.encode64(:erlang.term_to_binary({g.rank, g.size, g.backend, results})))
