defmodule ExMLX.Reliability.LoadTest do
  # 64 processes × 500 mixed operations, shared and private tensors; results
  # must equal a sequential run, with no deadlock. (How responsive the normal
  # schedulers stay meanwhile is measured by bin/bench's scheduler-fairness
  # row, not asserted here: it depends on the machine's load.)
  use ExUnit.Case, async: false
  @moduletag :reliability

  @processes 64
  @ops 500

  defp step(i, shared, private) do
    case rem(i, 10) do
      0 ->
        ExMLX.full(i, {:s, 32}, {3}) |> ExMLX.to_list()

      1 ->
        ExMLX.add(shared, private) |> ExMLX.sum() |> ExMLX.item()

      2 ->
        ExMLX.matmul(ExMLX.reshape(shared, {4, 4}), ExMLX.reshape(private, {4, 4}))
        |> ExMLX.to_binary()

      3 ->
        ExMLX.reduce_max(ExMLX.multiply(shared, private), axes: [0]) |> ExMLX.item()

      4 ->
        shared |> ExMLX.slice([rem(i, 8)], [16]) |> ExMLX.sum() |> ExMLX.item()

      5 ->
        private |> ExMLX.Wire.encode() |> ExMLX.Wire.decode!() |> ExMLX.to_binary()

      6 ->
        ExMLX.item(ExMLX.argmax(ExMLX.subtract(private, shared)))

      7 ->
        ExMLX.transpose(ExMLX.reshape(private, {2, 8})) |> ExMLX.to_binary()

      8 ->
        ExMLX.from_binary(ExMLX.to_binary(shared), {:f, 32}, {16}) |> ExMLX.mean() |> ExMLX.item()

      9 ->
        ExMLX.sort(private, direction: :desc) |> ExMLX.to_binary()
    end
  end

  defp run(p, shared) do
    private =
      ExMLX.from_binary(
        for(j <- 0..15, into: <<>>, do: <<j * p * 0.25 - 1.0::32-float-little>>),
        {:f, 32},
        {16}
      )

    for i <- 1..@ops, do: step(i + p, shared, private)
  end

  @tag timeout: 300_000
  test "#{@processes} processes × #{@ops} ops match the sequential run" do
    shared =
      ExMLX.from_binary(
        for(j <- 0..15, into: <<>>, do: <<j * 0.5::32-float-little>>),
        {:f, 32},
        {16}
      )

    sequential = for p <- 1..@processes, do: run(p, shared)

    concurrent =
      1..@processes
      |> Enum.map(fn p -> Task.async(fn -> run(p, shared) end) end)
      |> Task.await_many(240_000)

    assert concurrent == sequential
  end
end
