defmodule ExMLX.TestHelpers do
  @moduledoc false
  # Builders for small tensors from lists, encoded here with Elixir's own
  # binary syntax (independent of the code under test).

  def f32(list), do: ExMLX.from_binary(floats(list, 32), {:f, 32}, {length(list)})

  def f64(list),
    do:
      ExMLX.from_binary(floats(list, 64), {:f, 64}, {length(list)}, device: device_for({:f, 64}))

  @doc """
  The device tests put a tensor of `type` on: f64 on the CPU (MLX computes
  float64 there only; its GPU backends refuse it with a clear error, tested on
  its own), every other type on the default device.
  """
  def device_for({:f, 64}), do: :cpu
  def device_for(_type), do: ExMLX.default_device()

  @doc """
  Runs `python3 script args...` as `System.cmd/3` does (output and exit
  status), with the packages bin/setup installed into `_build/test-python`
  on the module path when it did (a Python that refuses installs into itself,
  PEP 668, gets them there).
  """
  def python(script, args) do
    packages = Path.expand("_build/test-python")

    env =
      if File.dir?(packages),
        do: [{"PYTHONPATH", Enum.join([packages | List.wrap(System.get_env("PYTHONPATH"))], ":")}],
        else: []

    System.cmd("python3", [script | args], stderr_to_stdout: true, env: env)
  end

  @doc """
  Runs `elixir -e script` in a new VM with this VM's code path, as
  `System.cmd/3` does (output, stderr included, and exit status); `opts`
  go to `System.cmd/3` (`:env`). Only the path's absolute entries are
  passed: OTP 25 puts "." on it, and in a checkout whose folder is named
  ex_mlx the child would take "." for the application's directory, so that
  `:code.priv_dir(:ex_mlx)` would be ./priv, which holds no NIF.
  """
  def elixir(script, opts \\ []) do
    paths =
      :code.get_path()
      |> Enum.map(&to_string/1)
      |> Enum.filter(&(Path.type(&1) == :absolute and File.dir?(&1)))
      |> Enum.flat_map(&["-pa", &1])

    System.cmd(
      System.find_executable("elixir"),
      paths ++ ["-e", script],
      [stderr_to_stdout: true] ++ opts
    )
  end

  @doc """
  `count` floats in [-scale, scale): a fixed pseudo-random sequence from
  `seed` (a Lehmer generator), the same on every machine.
  """
  def pseudo_random(count, scale, seed) do
    Enum.map_reduce(1..count, seed, fn _, s ->
      s = rem(s * 48_271, 2_147_483_647)
      {(s / 2_147_483_647 * 2 - 1) * scale, s}
    end)
    |> elem(0)
  end

  def s32(list), do: signed(list, 32)
  def s64(list), do: signed(list, 64)

  defp signed(list, bits) do
    data = for x <- list, into: <<>>, do: <<x::size(bits)-signed-little>>
    ExMLX.from_binary(data, {:s, bits}, {length(list)})
  end

  def u8(list), do: ExMLX.from_binary(:erlang.list_to_binary(list), {:u, 8}, {length(list)})

  def floats(list, size), do: for(x <- list, into: <<>>, do: float(x, size))

  def float(:nan, 32), do: <<0x7FC00000::32-little>>
  def float(:infinity, 32), do: <<0x7F800000::32-little>>
  def float(:neg_infinity, 32), do: <<0xFF800000::32-little>>
  def float(:nan, 64), do: <<0x7FF8000000000000::64-little>>
  def float(:infinity, 64), do: <<0x7FF0000000000000::64-little>>
  def float(:neg_infinity, 64), do: <<0xFFF0000000000000::64-little>>
  def float(x, size), do: <<x::float-size(size)-little>>

  @doc "Every type ExMLX supports (as `ExMLX.Tensor` types)."
  def types do
    [
      {:u, 8},
      {:u, 16},
      {:u, 32},
      {:u, 64},
      {:s, 8},
      {:s, 16},
      {:s, 32},
      {:s, 64},
      {:f, 16},
      {:bf, 16},
      {:f, 32},
      {:f, 64},
      {:c, 64},
      :bool
    ]
  end

  @doc """
  Every error kind ExMLX documents: ExMLX.Error's kinds, then the wire
  format's decoding errors (docs/wire-format.md).
  """
  def error_kinds do
    [:argument, :type, :device, :out_of_memory, :mlx, :not_loaded, :internal] ++
      [:distributed] ++
      [:bad_magic, :unsupported_version, :unknown_dtype, :bad_rank, :truncated] ++
      [:trailing_bytes, :size_overflow, :length_mismatch, :checksum_mismatch] ++
      [:invalid_bool, :bad_header_length, :invalid_header, :offsets_out_of_range] ++
      [:overlapping_offsets]
  end

  @doc "Lets garbage collection of dropped tensors (and their MLX memory) finish."
  def settle do
    for _ <- 1..3 do
      :erlang.garbage_collect()
      Process.sleep(20)
    end

    :ok
  end

  @doc """
  Active memory once it is at most `slack` bytes above `baseline` (below
  it is fine: tensors other tests left as garbage when the baseline was
  read may be freed since): collects garbage and makes a round trip through
  the CPU worker (which drops the arrays released before it) until it is,
  or until `wait_ms` have passed (a bound far beyond any load: a busy
  machine frees late, a leak never), then returns what it reads.
  """
  def settle_to(baseline, slack, wait_ms \\ 120_000) do
    deadline = System.monotonic_time(:millisecond) + wait_ms
    settle_until(baseline, slack, deadline)
  end

  defp settle_until(baseline, slack, deadline) do
    settle()
    # (a job of the worker's queued after every release so far: a product
    # is never run on the calling thread, docs/decisions/0010)
    one = ExMLX.full(1.0, {:f, 32}, {1, 1}, device: :cpu)
    ExMLX.matmul(one, one) |> ExMLX.item()
    active = ExMLX.Memory.stats().active

    if active - baseline <= slack or System.monotonic_time(:millisecond) > deadline do
      active
    else
      Process.sleep(50)
      settle_until(baseline, slack, deadline)
    end
  end

  @doc "Drops every message in the mailbox (replies nobody waits for)."
  def drain_mailbox do
    receive do
      _ -> drain_mailbox()
    after
      0 -> :ok
    end
  end

  @doc """
  `count` deterministic mixed ops on `shared` and `private` (float32
  tensors of 16 elements), each read back (a number, a list or a binary):
  the `k`-th is the op of `k + p` of the eleven below.
  """
  def mixed_ops(p, count, shared, private),
    do: for(i <- 1..count, do: mixed_op(i + p, shared, private))

  defp mixed_op(i, shared, private) do
    case rem(i, 11) do
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

      10 ->
        ExMLX.iota({:s, 32}, {i + 1}) |> ExMLX.sum() |> ExMLX.item()
    end
  end

  @doc """
  `run.(p)` for each `p` in `1..processes`: one after another, then each in
  a task of its own, all at once (awaited for up to `timeout` ms). Returns
  `{sequential, concurrent}`, the results in the order of `p` in both.
  """
  def sequential_and_concurrent(processes, timeout, run) do
    sequential = for p <- 1..processes, do: run.(p)

    concurrent =
      1..processes
      |> Enum.map(fn p -> Task.async(fn -> run.(p) end) end)
      |> Task.await_many(timeout)

    {sequential, concurrent}
  end

  def assert_close(got, expected, tol, label) do
    Enum.zip(got, expected)
    |> Enum.with_index()
    |> Enum.each(fn {{g, e}, i} ->
      ok = is_float(g) and abs(g - e) <= tol * max(1.0, abs(e))
      ExUnit.Assertions.assert(ok, "#{label}[#{i}]: got #{inspect(g)}, expected #{inspect(e)}")
    end)

    ExUnit.Assertions.assert(length(got) == length(expected), "#{label}: lengths differ")
  end

  # Polls a process's status until it is `status` (each poll sleeps 1 ms,
  # letting the scheduler run others): `status`, `:exited`, or `:never`
  # after `polls` polls (the caller's assertion guards against a hang).
  def wait_for_status(pid, status, polls \\ 50_000)
  def wait_for_status(_pid, _status, 0), do: :never

  def wait_for_status(pid, status, polls) do
    case Process.info(pid, :status) do
      {:status, ^status} ->
        status

      nil ->
        :exited

      _ ->
        Process.sleep(1)
        wait_for_status(pid, status, polls - 1)
    end
  end
end
