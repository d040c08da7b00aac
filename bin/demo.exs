# A short tour of ExMLX (run with bin/demo). Prints what it does as it goes.

f32 = fn list -> for x <- list, into: <<>>, do: <<x::32-float-little>> end
read_f32 = fn bin -> for <<x::32-float-little <- bin>>, do: x end
read_f64 = fn bin -> for <<x::64-float-little <- bin>>, do: x end

IO.puts("ExMLX demo: MLX #{ExMLX.mlx_version()}, default device #{ExMLX.default_device()}\n")

a = ExMLX.from_binary(f32.([1, 2, 3, 4, 5, 6]), {:f, 32}, {2, 3})
row = ExMLX.from_binary(f32.([10, 20, 30]), {:f, 32}, {3})
IO.puts("a   = #{inspect(a)}  #{inspect(read_f32.(ExMLX.to_binary(a)))}")
IO.puts("row = #{inspect(row)}  #{inspect(read_f32.(ExMLX.to_binary(row)))}")

sum = ExMLX.add(a, row)
IO.puts("a + row (broadcast) = #{inspect(sum)}  #{inspect(read_f32.(ExMLX.to_binary(sum)))}")

x = ExMLX.from_binary(<<0.1::64-float-little>>, {:f, 64}, {})
y = ExMLX.from_binary(<<0.2::64-float-little>>, {:f, 64}, {})

IO.puts(
  "0.1 + 0.2 in real f64 on the CPU = #{inspect(read_f64.(ExMLX.to_binary(ExMLX.add(x, y))))}"
)

try do
  ExMLX.add(a, ExMLX.from_binary(f32.([1, 2]), {:f, 32}, {2}))
rescue
  e in ExMLX.Error ->
    IO.puts("shapes {2, 3} + {2} -> ExMLX.Error (#{e.kind}): #{Exception.message(e)}")
end

# A lazy graph of 1,000 additions, computed by one eval.
one = ExMLX.from_binary(f32.([1]), {:f, 32}, {})

{us, total} =
  :timer.tc(fn ->
    Enum.reduce(1..1000, one, fn _, acc -> ExMLX.add(acc, one) end)
    |> ExMLX.eval()
    |> ExMLX.to_binary()
    |> read_f32.()
  end)

IO.puts(
  "1 + 1,000 lazy additions = #{inspect(total)} (#{Float.round(us / 1000, 2)} ms, one eval)"
)

# Many processes at once: each call runs on the device's worker thread.
results =
  1..8
  |> Task.async_stream(fn i ->
    t = ExMLX.from_binary(f32.([i]), {:f, 32}, {})
    t |> ExMLX.add(t) |> ExMLX.to_binary() |> read_f32.()
  end)
  |> Enum.map(fn {:ok, [v]} -> v end)

IO.puts("8 processes computing i + i: #{inspect(results)}")
