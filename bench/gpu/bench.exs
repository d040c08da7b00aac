# ExMLX's GPU benchmark rows (bench/gpu/README.md): matmul, dispatch and
# transfers on :gpu, the same measurements as bench/gpu/reference.py makes
# for Python mlx and PyTorch. bench/gpu/run.sh bench alternates the three and
# bench/gpu/report.py turns their lines into bench/results/gpu.md.
#
#   elixir -pa EBIN bench/gpu/bench.exs OUT_FILE [tf32-off]
#
# Each row is one line of OUT_FILE: "exmlx<TAB>row<TAB>unit<TAB>value", the
# value a median over its repetitions. Inputs are materialized on the GPU
# (sin of a range, cast), the same values in every implementation.

[out | flags] = System.argv()
tf32_off? = "tf32-off" in flags
{:ok, _} = Application.ensure_all_started(:ex_mlx)
true = ExMLX.device_available?(:gpu) || raise "no GPU in this MLX build"

defmodule Bench.GPU do
  @moduledoc false

  def median(samples) do
    sorted = Enum.sort(samples)
    n = length(sorted)

    if rem(n, 2) == 1,
      do: Enum.at(sorted, div(n, 2)),
      else: (Enum.at(sorted, div(n, 2) - 1) + Enum.at(sorted, div(n, 2))) / 2
  end

  # Seconds per call of `fun`: the median of `reps` timed calls after `warmup`.
  def timed(fun, reps, warmup \\ 3) do
    for _ <- 1..warmup, do: fun.()

    for _ <- 1..reps do
      t = System.monotonic_time()
      fun.()
      System.convert_time_unit(System.monotonic_time() - t, :native, :nanosecond) / 1.0e9
    end
    |> median()
  end

  # n × n of `type` on the GPU: sin(0, 1, 2, ...) cast, evaluated
  def matrix(n, type) do
    ExMLX.iota({:f, 32}, {n, n}, device: :gpu)
    |> ExMLX.sin()
    |> ExMLX.as_type(type)
    |> ExMLX.eval()
  end
end

import Bitwise
alias Bench.GPU
file = File.open!(out, [:write, :utf8])
row = fn name, unit, value -> IO.write(file, "exmlx\t#{name}\t#{unit}\t#{value}\n") end

matmul_types =
  if tf32_off?,
    do: [{{:f, 32}, "f32 (TF32 off)"}],
    else: [{{:bf, 16}, "bf16"}, {{:f, 16}, "f16"}, {{:f, 32}, "f32 (TF32 on)"}]

for {type, label} <- matmul_types, n <- [4096, 8192] do
  a = GPU.matrix(n, type)
  b = GPU.matrix(n, type)
  reps = if n == 4096, do: 50, else: 20
  s = GPU.timed(fn -> ExMLX.matmul(a, b) |> ExMLX.eval() end, reps)
  row.("matmul #{label} #{n}²", "TFLOP/s", 2 * n * n * n / s / 1.0e12)

  if type == {:bf, 16} do
    # the same, each result freed at once (as Python's reference counting
    # does) instead of when the process's garbage collector gets to it
    s =
      GPU.timed(
        fn -> ExMLX.matmul(a, b) |> ExMLX.eval() |> ExMLX.deallocate() end,
        reps
      )

    row.(
      "matmul #{label} #{n}², each result freed at once",
      "TFLOP/s",
      2 * n * n * n / s / 1.0e12
    )

    # ten products queued, one evaluation: the per-call path's share
    s =
      GPU.timed(
        fn ->
          Enum.map(1..10, fn _ -> ExMLX.matmul(a, b) end) |> Enum.each(&ExMLX.eval/1)
        end,
        div(reps, 5)
      )

    row.(
      "matmul #{label} #{n}², 10 queued then evaluated",
      "TFLOP/s",
      10 * 2 * n * n * n / s / 1.0e12
    )
  end
end

unless tf32_off? do
  # streams: two independent chains of 20 products (bf16 1024², kernels too
  # small to fill the GPU alone), both on the default stream, or one on a
  # stream of its own (ExMLX.Stream); both evaluated at once
  other = ExMLX.Stream.new(:gpu).device
  a = GPU.matrix(1024, {:bf, 16})
  b = GPU.matrix(1024, {:bf, 16})
  {a2, b2} = {ExMLX.transfer(a, other), ExMLX.transfer(b, other)}
  chain = fn x, y -> Enum.reduce(1..20, x, fn _, acc -> ExMLX.matmul(acc, y) end) end

  both = fn c1, c2 ->
    [Task.async(fn -> ExMLX.eval(c1) end), Task.async(fn -> ExMLX.eval(c2) end)]
    |> Task.await_many(:infinity)
  end

  s = GPU.timed(fn -> both.(chain.(a, b), chain.(a, b)) end, 30)
  row.("2 chains of 20 matmuls bf16 1024², one stream", "µs", s * 1.0e6)
  s = GPU.timed(fn -> both.(chain.(a, b), chain.(a2, b2)) end, 30)
  row.("2 chains of 20 matmuls bf16 1024², two streams", "µs", s * 1.0e6)

  # lazy dispatch: a graph of 1,000 adds, then one evaluation
  x = ExMLX.full(1.0, {:f, 32}, {16}, device: :gpu) |> ExMLX.eval()

  s =
    GPU.timed(
      fn -> Enum.reduce(1..1000, x, fn _, acc -> ExMLX.add(acc, x) end) |> ExMLX.eval() end,
      20
    )

  row.("lazy dispatch: 1,000 adds, then eval", "µs/op", s * 1.0e6 / 1000)

  # a lazy chain of work the GPU takes time over: 100 adds on 1M f32, then
  # one evaluation (with evaluation ahead of reads, ExMLX.set_evaluate_ahead/2,
  # the GPU computes while the chain is still being built)
  one = ExMLX.full(1.0, {:f, 32}, {}, device: :gpu) |> ExMLX.eval()
  big = GPU.matrix(1000, {:f, 32}) |> ExMLX.reshape({1_000_000})

  s =
    GPU.timed(
      fn -> Enum.reduce(1..100, big, fn _, acc -> ExMLX.add(acc, one) end) |> ExMLX.eval() end,
      20
    )

  row.("lazy chain: 100 adds on 1M f32, then eval", "µs/op", s * 1.0e6 / 100)

  # the same two chains with evaluation ahead off: MLX evaluates only when
  # the result is read, as Python mlx does
  ahead = ExMLX.set_evaluate_ahead(:gpu, false)

  s =
    GPU.timed(
      fn -> Enum.reduce(1..100, big, fn _, acc -> ExMLX.add(acc, one) end) |> ExMLX.eval() end,
      20
    )

  row.(
    "lazy chain: 100 adds on 1M f32, then eval (evaluation ahead off)",
    "µs/op",
    s * 1.0e6 / 100
  )

  s =
    GPU.timed(
      fn -> Enum.reduce(1..1000, x, fn _, acc -> ExMLX.add(acc, x) end) |> ExMLX.eval() end,
      20
    )

  row.("lazy dispatch: 1,000 adds, then eval (evaluation ahead off)", "µs/op", s * 1.0e6 / 1000)

  # the graph only: 1,000 adds built on the worker (reading the last one's
  # shape waits for that), nothing evaluated (evaluation ahead still off)
  s =
    GPU.timed(
      fn -> Enum.reduce(1..1000, x, fn _, acc -> ExMLX.add(acc, x) end) |> ExMLX.shape() end,
      20
    )

  row.("lazy dispatch: building the graph only", "µs/op", s * 1.0e6 / 1000)
  ExMLX.set_evaluate_ahead(:gpu, ahead)

  # the floor of both: the same graph built and evaluated by Rust on ExMLX's
  # worker thread, no Elixir per op
  floor = ExMLX.Call.run(&ExMLX.Native.worker_chain_seconds(&1, :gpu, 1000, 16, 20))
  build = floor |> Enum.map(&elem(&1, 0)) |> GPU.median()
  total = floor |> Enum.map(&elem(&1, 1)) |> GPU.median()
  row.("lazy dispatch floor: the same graph built by Rust on the worker", "µs/op", total * 1.0e3)
  row.("lazy dispatch floor: building only, by Rust on the worker", "µs/op", build * 1.0e3)

  # eager: one op and a read of its scalar
  s = GPU.timed(fn -> ExMLX.add(one, one) |> ExMLX.item() end, 500, 20)
  row.("eager: add + item", "µs", s * 1.0e6)

  for {bytes, label} <- [{1 <<< 20, "1 MB"}, {256 <<< 20, "256 MB"}] do
    n = div(bytes, 4)
    host = :binary.copy(<<1.0::32-float-little>>, n)
    reps = if bytes > 1 <<< 20, do: 10, else: 100

    # host → GPU: an array made from host bytes, summed on the GPU
    s =
      GPU.timed(
        fn ->
          ExMLX.from_binary(host, {:f, 32}, {n}, device: :gpu) |> ExMLX.sum() |> ExMLX.eval()
        end,
        reps
      )

    row.(
      "host → GPU #{label} (made from host bytes, summed on the GPU)",
      "GB/s",
      bytes / s / 1.0e9
    )

    # GPU → host: a result computed on the GPU, its bytes copied by the host
    on_gpu = ExMLX.from_binary(host, {:f, 32}, {n}, device: :gpu) |> ExMLX.eval()

    s =
      GPU.timed(
        fn -> ExMLX.add(on_gpu, one) |> ExMLX.to_binary() |> :binary.copy() end,
        reps
      )

    row.("GPU → host #{label} (add on the GPU, every byte copied)", "GB/s", bytes / s / 1.0e9)
  end
end

File.close(file)
