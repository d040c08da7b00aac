defmodule ExMLX.GPUGraphCacheTest do
  # MLX's CUDA backend records each graph of kernels it launches in a cache
  # of CUDA graphs (400 by default) and counts the cache's misses over the
  # life of the process; past twice its capacity, every further miss threw
  # "Cache thrashing is happening ..." (90 tests of the GPU suite failed
  # once the suite had made 800 distinct graphs). The NIF turns that check
  # off where the user has not set MLX_ENABLE_CACHE_THRASHING_CHECK
  # (native/ex_mlx/src/lib.rs): a VM that makes a thousand distinct graphs
  # on the GPU computes every one. (With the variable set to 1 before the
  # VM starts, this test fails: it was checked so on an H100.)
  use ExUnit.Case, async: false

  unless ExMLX.device_available?(:gpu) do
    @moduletag skip: "needs the GPU (MLX's CUDA backend)"
  end

  test "a thousand graphs of distinct shapes on the GPU all compute" do
    %ExMLX.Stream{device: stream} = ExMLX.Stream.new(:gpu)
    x = ExMLX.full(1.0, {:f, 32}, {4}, device: stream) |> ExMLX.eval()
    one = ExMLX.full(1.0, {:f, 32}, {}, device: stream) |> ExMLX.eval()
    chain = fn n -> Enum.reduce(1..n, x, fn _, acc -> ExMLX.add(acc, one) end) end

    # four chains of adds of lengths a, b, c, d (each at least 1, 16 in all
    # at most), summed: at most 19 kernels, one CUDA graph per evaluation
    # (MLX commits a graph every 20 kernels), and a distinct graph for each
    # combination of lengths
    lengths =
      for a <- 1..13, b <- 1..13, c <- 1..13, d <- 1..13, a + b + c + d <= 16, do: {a, b, c, d}

    lengths = Enum.take(lengths, 1000)
    assert length(lengths) == 1000

    for {a, b, c, d} = case <- lengths do
      sum =
        chain.(a)
        |> ExMLX.add(chain.(b))
        |> ExMLX.add(chain.(c))
        |> ExMLX.add(chain.(d))

      # each chain is 1 + its length; exact in f32
      expected = 4.0 + a + b + c + d
      assert ExMLX.to_list(sum) == List.duplicate(expected, 4), inspect(case)
    end
  end
end
