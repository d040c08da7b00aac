defmodule ExMLX.EvaluateAheadTest do
  # Evaluation ahead of reads (ExMLX.set_evaluate_ahead/2): an idle worker
  # computes the newest result it built before anyone reads it. Seen from
  # here through MLX's memory figures: a lazy result holds no buffer until it
  # is computed. Not async: the setting is global, and the figures count
  # every tensor of the VM.
  use ExUnit.Case, async: false

  alias ExMLX.Stream

  @devices if ExMLX.device_available?(:gpu), do: [:cpu, :gpu], else: [:cpu]
  # 16 Mi f32 elements: 64 MiB, far above anything else the test allocates
  @elements 16 * 1024 * 1024
  @bytes 4 * @elements

  defp with_ahead(device, on, fun) do
    previous = ExMLX.set_evaluate_ahead(device, on)

    try do
      fun.()
    after
      ExMLX.set_evaluate_ahead(device, previous)
    end
  end

  # A computed tensor of @elements ones on a new stream of `device`, and the
  # peak memory figure reset to the active one after it.
  defp ones(device) do
    %Stream{device: s} = Stream.new(device)
    # (not `full`: MLX keeps a tensor of one value, and what is computed
    # from it alone, as one element)
    zero = ExMLX.full(0.0, {:f, 32}, {}, device: s)
    zeros = ExMLX.multiply(ExMLX.iota({:f, 32}, {@elements}, device: s), zero)
    ones = ExMLX.add(zeros, ExMLX.full(1.0, {:f, 32}, {}, device: s))
    ExMLX.eval(ones)
    :ok = Stream.synchronize(%Stream{device: s})
    :ok = ExMLX.Memory.reset_peak()
    {s, ones, ExMLX.Memory.stats().active}
  end

  # Polls `check` every 5 ms, up to 2 minutes (far beyond what load makes
  # of a few milliseconds' work): whether it came true.
  defp eventually(check, tries \\ 24_000) do
    cond do
      check.() -> true
      tries == 0 -> false
      true -> Process.sleep(5) && eventually(check, tries - 1)
    end
  end

  for device <- @devices do
    test "on #{device}, with evaluation ahead on, a result is computed before it is read" do
      device = unquote(device)

      with_ahead(device, true, fn ->
        {s, ones, active} = ones(device)
        twos = ExMLX.add(ones, ones)
        # nothing reads `twos`: its 64 MiB buffer appears all the same
        assert eventually(fn -> ExMLX.Memory.stats().peak >= active + div(@bytes, 2) end)
        assert ExMLX.item(ExMLX.sum(twos)) == 2.0 * @elements
        assert twos.device == s
        # (`ones` stays referenced until here: collected earlier, its tensor
        # lets go of its buffer, and MLX may compute `twos` into it,
        # allocating nothing; a likely cause of this check's one failure in
        # a run of the whole suite, 1 of 4 runs with its seed)
        assert ExMLX.item(ExMLX.sum(ones)) == 1.0 * @elements
      end)
    end

    test "on #{device}, with evaluation ahead off, a result is computed when read" do
      device = unquote(device)

      with_ahead(device, false, fn ->
        {s, ones, active} = ones(device)
        twos = ExMLX.add(ones, ones)
        # the worker built `twos` (the synchronization is queued after it)
        # and waited; MLX computed nothing
        :ok = Stream.synchronize(%Stream{device: s})
        Process.sleep(50)
        assert ExMLX.Memory.stats().peak < active + div(@bytes, 2)
        assert ExMLX.item(ExMLX.sum(twos)) == 2.0 * @elements
      end)
    end

    test "on #{device}, a chain of ops evaluated ahead in batches gives what it gives without" do
      device = unquote(device)

      x =
        ExMLX.from_binary(<<0.5::32-float-little, -3.0::32-float-little>>, {:f, 32}, {2},
          device: device
        )

      chain = fn ->
        Enum.reduce(1..200, x, fn i, acc ->
          acc
          |> ExMLX.multiply(ExMLX.full(1.5, {:f, 32}, {}, device: device))
          |> ExMLX.subtract(ExMLX.full(i * 1.0, {:f, 32}, {}, device: device))
        end)
        |> ExMLX.to_list()
      end

      # the same recurrence in Elixir, f32-rounded at each step as MLX rounds
      f32 = fn v ->
        <<r::32-float-little>> = <<v::32-float-little>>
        r
      end

      expected =
        for v <- [0.5, -3.0] do
          Enum.reduce(1..200, v, fn i, acc -> f32.(f32.(acc * 1.5) - i) end)
        end

      assert with_ahead(device, true, chain) == expected
      assert with_ahead(device, false, chain) == expected
    end
  end

  test "the setting reads back, and bad settings name the problem" do
    previous = ExMLX.set_evaluate_ahead(:cpu, true)
    assert ExMLX.evaluate_ahead?(:cpu)
    assert ExMLX.set_evaluate_ahead(:cpu, false) == true
    refute ExMLX.evaluate_ahead?(:cpu)
    ExMLX.set_evaluate_ahead(:cpu, previous)

    assert_raise ArgumentError, "expected true or false for evaluation ahead, got: :yes", fn ->
      ExMLX.set_evaluate_ahead(:cpu, :yes)
    end

    error =
      assert_raise ExMLX.Error, fn ->
        ExMLX.Native.device_evaluate_ahead(:cpu, 1) |> ExMLX.Call.value()
      end

    assert error.kind == :argument
    assert error.message == "setting: expected true, false or nil, got: 1"
  end
end
