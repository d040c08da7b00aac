defmodule ExMLX.Reliability.LoadTest do
  # 64 processes × 500 mixed operations, shared and private tensors; results
  # must equal a sequential run, with no deadlock. (How responsive the normal
  # schedulers stay meanwhile is measured by bin/bench's scheduler-fairness
  # row, not asserted here: it depends on the machine's load.)
  use ExUnit.Case, async: false
  @moduletag :reliability

  import ExMLX.TestHelpers

  @processes 64
  @ops 500

  defp run(p, shared),
    do: mixed_ops(p, @ops, shared, f32(Enum.map(0..15, &(&1 * p * 0.25 - 1.0))))

  @tag timeout: 300_000
  test "#{@processes} processes × #{@ops} ops match the sequential run" do
    shared = f32(Enum.map(0..15, &(&1 * 0.5)))
    {sequential, concurrent} = sequential_and_concurrent(@processes, 240_000, &run(&1, shared))
    assert concurrent == sequential
  end
end
