defmodule ExMLX.StreamTest do
  # Streams (ExMLX.Stream): their tensors, the boundaries between them, and
  # their independence, shown with the test hook that holds the CPU's
  # default worker (no timing involved). On a GPU machine the same checks
  # run on a GPU stream too.
  use ExUnit.Case, async: false
  doctest ExMLX.Stream

  alias ExMLX.Stream

  @devices if ExMLX.device_available?(:gpu), do: [:cpu, :gpu], else: [:cpu]

  for device <- @devices do
    test "ops on a #{device} stream's tensors run there, with the right values" do
      device = unquote(device)
      %Stream{device: {^device, n} = s} = Stream.new(device)
      assert n > 0

      t =
        ExMLX.from_binary(<<1.5::32-float-little, -2.0::32-float-little>>, {:f, 32}, {2},
          device: s
        )

      assert t.device == s
      sum = ExMLX.add(t, t) |> ExMLX.multiply(ExMLX.full(2.0, {:f, 32}, {}, device: s))
      assert sum.device == s
      assert ExMLX.to_list(sum) == [6.0, -8.0]
      assert Stream.synchronize(%Stream{device: s}) == :ok
      assert inspect(sum) == "#ExMLX.Tensor<f32[2] #{device} stream #{n}>"
    end

    test "a #{device} stream's tensor meets another stream's through transfer/2 only" do
      device = unquote(device)
      %Stream{device: s} = Stream.new(device)
      %Stream{device: {_, n2} = s2} = Stream.new(device)
      {_, n} = s
      a = ExMLX.full(3, {:s, 32}, {2}, device: s)
      b = ExMLX.full(4, {:s, 32}, {2}, device: s2)

      error = assert_raise ExMLX.Error, fn -> ExMLX.add(a, b) |> ExMLX.eval() end

      assert {error.kind, error.message} ==
               {:device,
                "tensors are on different devices (#{device} stream #{n} and " <>
                  "#{device} stream #{n2}); transfer one first"}

      moved = ExMLX.transfer(b, s)
      assert moved.device == s
      assert ExMLX.add(a, moved) |> ExMLX.to_list() == [7, 7]
      assert ExMLX.transfer(a, device) |> ExMLX.to_list() == [3, 3]
    end
  end

  test "a stream's work does not wait for the default stream's" do
    # The CPU's default worker is held until released: work on a CPU stream
    # completes meanwhile, work on the default stream does not (`floor`
    # needs the worker, where the host could add and sum computed tensors).
    s = Stream.new(:cpu).device
    x = ExMLX.full(5.0, {:f, 32}, {4}, device: s) |> ExMLX.eval()
    y = ExMLX.full(5.0, {:f, 32}, {4}, device: :cpu) |> ExMLX.eval()
    # (add's first call reads MLX's type rules on the default CPU worker,
    # ExMLX.Prediction: done here, before the hold)
    assert ExMLX.add(y, y) |> ExMLX.floor() |> ExMLX.sum() |> ExMLX.item() == 40.0
    hold = make_ref()
    :ok = ExMLX.Native.hold_worker_for_test(hold)
    parent = self()

    try do
      spawn_link(fn ->
        send(parent, {:default, ExMLX.add(y, y) |> ExMLX.floor() |> ExMLX.sum() |> ExMLX.item()})
      end)

      spawn_link(fn ->
        send(parent, {:stream, ExMLX.add(x, x) |> ExMLX.floor() |> ExMLX.sum() |> ExMLX.item()})
      end)

      assert_receive {:stream, 40.0}, 120_000
      refute_received {:default, _}
    after
      ExMLX.Native.release_worker_for_test()
    end

    assert_receive {^hold, {:ok, true}}, 120_000
    assert_receive {:default, 40.0}, 120_000
  end

  test "bad streams and devices are named" do
    error =
      assert_raise ExMLX.Error, fn -> ExMLX.full(1, {:u, 8}, {1}, device: {:cpu, 4_000_000}) end

    assert {error.kind, error.message} ==
             {:argument,
              "device: there is no cpu stream 4000000 ({:cpu, 4000000}): " <>
                "ExMLX.Stream.new/1 makes streams"}

    error = assert_raise ExMLX.Error, fn -> ExMLX.full(1, {:u, 8}, {1}, device: {:cpu, 0}) end

    assert {error.kind, error.message} ==
             {:argument,
              "device: expected a device, :cpu, :gpu or a stream ({:gpu, 1}), got: {:cpu, 0}"}

    assert_raise ArgumentError,
                 "expected a device (:cpu, :gpu, or a stream such as {:gpu, 1}), got: :tpu",
                 fn -> Stream.new(:tpu) end

    assert ExMLX.Native.stream_new(:tpu) ==
             {:error,
              {:argument,
               "device: expected a device, :cpu, :gpu or a stream ({:gpu, 1}), got: :tpu"}}

    unless ExMLX.device_available?(:gpu) do
      error = assert_raise ExMLX.Error, fn -> Stream.new(:gpu) end

      assert {error.kind, error.message} ==
               {:device,
                "the gpu device is not available in this MLX build " <>
                  "(MLX #{ExMLX.Build.mlx_version()}); use :cpu"}
    end
  end
end
