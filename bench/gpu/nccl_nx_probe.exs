# Collectives on Nx tensors across GPUs with the NCCL backend, case by case
# (bench/gpu/README.md): ExMLX tensors made by reshape and concatenate,
# ExMLX.Distributed.average_gradients/2 on Nx tensors, and
# ExMLX.Distributed.Defn.average_gradients/2 inside a compiled function:
#
#   bench/gpu/run.sh elixir bench/gpu/nccl_nx_probe.exs [N]
#
# Each rank prints "CASE <name> ok <values>" or "CASE <name> error <message>".
alias ExMLX.Distributed, as: D

case System.argv() do
  ["rank"] ->
    {:ok, _} = Application.ensure_all_started([:nx, :ex_mlx])
    g = D.init(backend: :nccl, strict: true, timeout: 60_000)
    Nx.default_backend({ExMLX.Backend, device: :gpu})

    # examples/data_parallel.exs's step, once, on a slice of Nx.Random data
    training_step = fn g ->
      key = Nx.Random.key(42)
      {x, _key} = Nx.Random.normal(key, shape: {8, 4})
      y = Nx.sum(x, axes: [1])
      my_x = Nx.slice_along_axis(x, g.rank * 4, 4, axis: 0)
      my_y = Nx.slice_along_axis(y, g.rank * 4, 4, axis: 0)
      params = %{w: Nx.broadcast(0.0, {4}), b: Nx.tensor(0.0)}

      step = fn params, x, y ->
        grads =
          Nx.Defn.grad(params, fn p ->
            x |> Nx.dot(p.w) |> Nx.add(p.b) |> Nx.subtract(y) |> Nx.pow(2) |> Nx.mean()
          end)

        grads = ExMLX.Distributed.Defn.average_gradients(grads)

        %{
          w: Nx.subtract(params.w, Nx.multiply(grads.w, 0.1)),
          b: Nx.subtract(params.b, Nx.multiply(grads.b, 0.1))
        }
      end

      Nx.Defn.jit(step, compiler: ExMLX.Compiler).(params, my_x, my_y)
    end

    cases = [
      {"full", fn -> D.all_sum(ExMLX.full(g.rank + 1, {:f, 32}, {4}, device: :gpu)) end},
      {"reshape",
       fn ->
         D.all_sum(ExMLX.full(g.rank + 1, {:f, 32}, {2, 2}, device: :gpu) |> ExMLX.reshape({4}))
       end},
      {"concatenate",
       fn ->
         a = ExMLX.full(g.rank + 1, {:f, 32}, {2}, device: :gpu)
         D.all_sum(ExMLX.concatenate([a, a]))
       end},
      {"nx iota", fn -> D.all_sum(ExMLX.Backend.from_nx(Nx.iota({4}, type: :f32))) end},
      {"nx computed",
       fn ->
         D.all_sum(ExMLX.Backend.from_nx(Nx.multiply(Nx.iota({4}, type: :f32), g.rank + 1)))
       end},
      {"average_gradients",
       fn -> D.average_gradients(%{w: Nx.iota({4}, type: :f32), b: Nx.tensor(1.0 * g.rank)}) end},
      {"training step", fn -> training_step.(g) end},
      {"training step, no evaluation ahead",
       fn ->
         ExMLX.set_evaluate_ahead(:gpu, false)
         training_step.(g)
       end},
      {"defn average_gradients",
       fn ->
         f = fn w, b ->
           ExMLX.Distributed.Defn.average_gradients(%{w: Nx.multiply(w, 2), b: b})
         end

         Nx.Defn.jit(f, compiler: ExMLX.Compiler).(
           Nx.iota({4}, type: :f32),
           Nx.tensor(1.0 * g.rank)
         )
       end}
    ]

    for {name, run} <- cases do
      line =
        try do
          result = run.()

          values =
            case result do
              %ExMLX.Tensor{} = t -> ExMLX.to_list(t)
              other -> inspect(Map.new(other, fn {k, v} -> {k, Nx.to_flat_list(v)} end))
            end

          "ok #{inspect(values)}"
        rescue
          e -> "error #{Exception.message(e)}"
        end

      IO.puts("RANK #{g.rank} CASE #{name} #{line}")
    end

    System.halt(0)

  args ->
    n = with [n] <- args, do: String.to_integer(n), else: (_ -> 2)

    paths =
      for path <- :code.get_path(),
          path = to_string(path),
          String.contains?(path, "/lib/"),
          do: ["-pa", path]

    statuses =
      D.Launcher.run({"elixir", List.flatten(paths) ++ [__ENV__.file, "rank"]},
        n: n,
        backend: :nccl,
        deadline: 200_000,
        output: fn rank, line -> IO.puts("[#{rank}] #{line}") end
      )

    IO.puts("exits #{inspect(statuses)}")
end
