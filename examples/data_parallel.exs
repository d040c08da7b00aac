# Data-parallel training of a small plain-Nx model across ranks, each an OS
# process, with MLX's ring backend on loopback:
#
#     mix ex_mlx.launch -n 4 examples/data_parallel.exs
#
# (in a project with Nx; run without the launcher, it trains alone on the
# whole batch: the group of one). Every rank builds the same 64 examples of a
# noisy linear function, takes its equal share of them, computes the loss
# gradient on its share and averages the gradients over the ranks
# (ExMLX.Distributed.Defn.average_gradients/2): the mean of the shards'
# gradients is the whole batch's gradient, so every rank takes the step that
# one rank would take on the whole batch, and ends at the same loss.
# (already started under `mix run`; started here for `elixir -pa ...` too)
{:ok, _} = Application.ensure_all_started([:nx, :ex_mlx])
# EXMLX_DEVICE=gpu trains on the GPU (with the NCCL backend across GPUs)
device = String.to_existing_atom(System.get_env("EXMLX_DEVICE", "cpu"))
Nx.default_backend({ExMLX.Backend, device: device})
alias ExMLX.Distributed

defmodule DataParallel do
  import Nx.Defn

  defn loss(params, x, y) do
    pred = Nx.dot(x, params.w) + params.b
    Nx.mean((pred - y) ** 2)
  end

  defn step(params, x, y) do
    grads = grad(params, &loss(&1, x, y))
    grads = ExMLX.Distributed.Defn.average_gradients(grads)
    %{w: params.w - 0.1 * grads.w, b: params.b - 0.1 * grads.b}
  end
end

group = Distributed.init()
batch = 64
steps = String.to_integer(System.get_env("STEPS", "40"))

if rem(batch, group.size) != 0, do: raise("#{group.size} ranks do not divide a batch of #{batch}")

# the same data on every rank: a fixed key
key = Nx.Random.key(42)
{x, key} = Nx.Random.normal(key, shape: {batch, 4})
{noise, _key} = Nx.Random.normal(key, 0.0, 0.1, shape: {batch})
y = Nx.dot(x, Nx.tensor([1.5, -2.0, 0.5, 3.0])) |> Nx.add(0.7) |> Nx.add(noise)

# this rank's share
share = div(batch, group.size)
my_x = Nx.slice_along_axis(x, group.rank * share, share, axis: 0)
my_y = Nx.slice_along_axis(y, group.rank * share, share, axis: 0)

step = Nx.Defn.jit(&DataParallel.step/3, compiler: ExMLX.Compiler)
params = %{w: Nx.broadcast(0.0, {4}), b: Nx.tensor(0.0)}
# CURVE=1 prints the whole batch's loss after every step (rank 0)
curve? = System.get_env("CURVE") == "1" and group.rank == 0

params =
  Enum.reduce(1..steps, params, fn s, p ->
    p = step.(p, my_x, my_y)

    if curve?,
      do: IO.puts("CURVE #{group.size} #{s} #{DataParallel.loss(p, x, y) |> Nx.to_number()}")

    p
  end)

full_loss = DataParallel.loss(params, x, y) |> Nx.to_number()

IO.puts(
  "rank #{group.rank} of #{group.size}: loss on the whole batch after #{steps} steps: #{full_loss}"
)
