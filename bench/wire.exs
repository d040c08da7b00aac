# Wire-format throughput beside memcpy, in one run (mix run bench/wire.exs).
#
# A 64 MB f32 tensor: frame encode (evaluate, read contiguously, write
# header + data + CRC-32 into a new binary) and decode (check, CRC-32, copy
# into MLX), to_binary / from_binary, against :binary.copy/1 of the same
# bytes (the BEAM's memcpy into a fresh binary) and a plain memcpy timed in
# Rust, the reference of the × column.

defmodule Bench.Wire do
  @mb 1024 * 1024
  @runs 9

  def run(bytes \\ 64 * @mb) do
    n = div(bytes, 4)
    tensor = ExMLX.iota({:f, 32}, {n}) |> ExMLX.eval()
    data = ExMLX.to_binary(tensor)
    frame = ExMLX.Wire.encode(tensor)

    cases = [
      {"memcpy (:binary.copy/1)", fn -> :binary.copy(data) end},
      {"wire encode", fn -> ExMLX.Wire.encode(tensor) end},
      {"wire decode", fn -> ExMLX.Wire.decode!(frame) |> ExMLX.eval() end},
      {"to_binary", fn -> ExMLX.to_binary(tensor) end},
      {"from_binary", fn -> ExMLX.from_binary(data, {:f, 32}, {n}) |> ExMLX.eval() end}
    ]

    results =
      for {name, fun} <- cases do
        fun.()

        # Collect garbage between runs, so tensors from the previous run are
        # freed and MLX reuses their buffers, as a steady-state program does.
        times =
          for _ <- 1..@runs do
            :erlang.garbage_collect()
            elem(:timer.tc(fun), 0)
          end

        sorted = Enum.sort(times)
        median = Enum.at(sorted, div(@runs, 2))
        {name, median, Enum.at(sorted, 1), Enum.at(sorted, @runs - 2)}
      end

    # The reference: a plain copy of the same bytes timed in Rust (into a
    # warm buffer), in this run.
    rust = ExMLX.Native.memcpy_seconds(data, @runs) |> Enum.map(&round(&1 * 1.0e6)) |> Enum.sort()

    results = [
      {"memcpy (Rust)", Enum.at(rust, div(@runs, 2)), Enum.at(rust, 1), Enum.at(rust, @runs - 2)}
      | results
    ]

    {_, memcpy_us, _, _} = hd(results)
    gbps = fn us -> bytes / (us / 1.0e6) / 1.0e9 end
    IO.puts("#{div(bytes, @mb)} MB f32, median of #{@runs} runs\n")
    IO.puts("| operation | median ms | GB/s | × memcpy | spread ms |")
    IO.puts("|---|---:|---:|---:|---|")

    for {name, median, lo, hi} <- results do
      IO.puts(
        "| #{name} | #{Float.round(median / 1000, 2)} | #{Float.round(gbps.(median), 2)} | " <>
          "#{Float.round(memcpy_us / median, 2)} | #{Float.round(lo / 1000, 2)}–#{Float.round(hi / 1000, 2)} |"
      )
    end
  end
end

Bench.Wire.run()
