if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.WaitingBinariesTest do
    # Nx.from_binary on ExMLX.Backend queues the copy into MLX for the
    # device's worker and returns at once; the binary stays alive until the
    # copy is made. ExMLX.Op.from_binary_deferred/5 bounds how many bytes may
    # wait so (256 MiB): past it the caller waits for its tensor. Loading a
    # model's parameters holds no more host memory than that beyond the
    # loader's own.
    use ExUnit.Case, async: false

    alias ExMLX.TestHelpers

    @chunk 64 * 1024 * 1024
    @bound 256 * 1024 * 1024

    test "a caller making tensors from binaries waits once 256 MiB of them wait for the worker" do
      # The CPU worker is held by a test hook until released, so nothing
      # queued is copied meanwhile, however fast the machine is.
      hold = make_ref()
      :ok = ExMLX.Native.hold_worker_for_test(hold)
      parent = self()
      count = div(@bound, @chunk) + 2

      maker =
        spawn_link(fn ->
          for i <- 1..count do
            binary = :binary.copy(<<i::8>>, @chunk)
            t = Nx.from_binary(binary, :u8, backend: {ExMLX.Backend, device: :cpu})
            send(parent, {:made, i, t})
          end
        end)

      try do
        # The bound's worth of binaries is queued without waiting; the next
        # one passes the bound, so its caller waits for it.
        for i <- 1..div(@bound, @chunk), do: assert_receive({:made, ^i, _}, 120_000)
        assert TestHelpers.wait_for_status(maker, :waiting, 120_000) == :waiting
        refute_received {:made, _, _}
        assert ExMLX.Native.from_binary_waiting_bytes() == (div(@bound, @chunk) + 1) * @chunk
      after
        ExMLX.Native.release_worker_for_test()
      end

      assert_receive {^hold, {:ok, true}}, 120_000

      for i <- (div(@bound, @chunk) + 1)..count do
        assert_receive {:made, ^i, t}, 120_000
        assert Nx.to_number(t[0]) == i and Nx.to_number(t[-1]) == i
      end
    end
  end
end
