defmodule ExMLX.Distributed.Launcher do
  @moduledoc """
  Starts the ranks of a distributed run as OS processes and streams their
  output, each line prefixed with its rank: what `mix ex_mlx.launch` does
  (and MLX's `mlx.launch`).

  Every rank gets `MLX_RANK` and `MLX_HOSTFILE` in its environment, so that
  `ExMLX.Distributed.init/1` finds its group. On one machine, `n: 4` makes a
  loopback hostfile with free ports; for several machines, pass the
  hostfile and start on each machine the ranks whose addresses are its own
  (`:ranks`).

  With `backend: :nccl` (one machine, one GPU per rank, as MLX's launcher
  does it), every rank gets what MLX's NCCL backend reads instead:
  `MLX_RANK`, `MLX_WORLD_SIZE`, `NCCL_HOST_IP` and `NCCL_PORT` (the first
  host's address and a free port), `CUDA_VISIBLE_DEVICES` (its rank) and
  `NCCL_NVLS_ENABLE=0` (NVLink multicast off), unless `:env` sets them.

  When a rank fails (a non-zero exit status), the others get `:grace`
  milliseconds to finish, then are killed: a rank whose peer is gone would
  otherwise wait for its collectives' timeout.
  """

  alias ExMLX.Distributed

  @type status :: non_neg_integer() | :killed

  @doc """
  Runs `command` (`{executable, args}`) once per rank and waits for all of
  them: `%{rank => exit status}` (`:killed` for a rank it killed).

  Options:

    * `:n` - the number of ranks, on this machine (a loopback hostfile is made)
    * `:hostfile` - a hostfile (path or list) instead of `:n`
    * `:ranks` - the ranks to start here (default: all of the hostfile's)
    * `:env` - more environment variables, `[{name, value}]`
    * `:output` - `fn rank, line -> ... end` for each line a rank prints
      (stdout and stderr); default: `IO.puts("[rank] line")`
    * `:grace` - milliseconds the other ranks get after one fails (10 000)
    * `:deadline` - milliseconds after which every rank still running is
      killed (default `:infinity`)
    * `:cd` - the ranks' working directory
    * `:backend` - `:ring` (default) or `:nccl` (see above)
  """
  @spec run({String.t(), [String.t()]}, keyword()) :: %{non_neg_integer() => status()}
  def run({executable, args}, opts) do
    opts =
      Keyword.validate!(opts, [
        :n,
        :hostfile,
        :ranks,
        :cd,
        backend: :ring,
        env: [],
        output: &default_output/2,
        grace: 10_000,
        deadline: :infinity
      ])

    hosts = hosts(opts)

    path =
      Path.join(System.tmp_dir!(), "ex_mlx_hostfile_#{System.unique_integer([:positive])}.json")

    File.write!(path, Distributed.hostfile_json(hosts))
    ranks = opts[:ranks] || Enum.to_list(0..(length(hosts) - 1))

    for r <- ranks, not (is_integer(r) and r >= 0 and r < length(hosts)) do
      raise ArgumentError, "rank #{inspect(r)} is not in the hostfile (#{length(hosts)} ranks)"
    end

    exe = System.find_executable(executable) || executable
    nccl = nccl_env(opts[:backend], hosts)

    try do
      ports =
        Map.new(ranks, fn rank ->
          # (one rank: no group to join, and MLX's ring cannot make a ring
          # of one; the rank runs on the group of one)
          mlx_env =
            cond do
              nccl != nil -> nccl.(rank)
              length(hosts) > 1 -> [{"MLX_RANK", Integer.to_string(rank)}, {"MLX_HOSTFILE", path}]
              true -> []
            end

          # (:env last: what the caller sets wins)
          env =
            Enum.reject(mlx_env, fn {k, _} -> List.keymember?(opts[:env], k, 0) end) ++ opts[:env]

          port_opts =
            [
              :binary,
              :exit_status,
              :stderr_to_stdout,
              {:line, 65_536},
              args: args,
              env: charlists(env)
            ] ++
              if(opts[:cd], do: [cd: opts[:cd]], else: [])

          {Port.open({:spawn_executable, exe}, port_opts), rank}
        end)

      deadline = if opts[:deadline] == :infinity, do: :infinity, else: now() + opts[:deadline]
      collect(ports, %{}, %{}, deadline, opts)
    after
      File.rm(path)
    end
  end

  # The environment MLX's NCCL backend reads, per rank (nil for the ring).
  defp nccl_env(:ring, _hosts), do: nil

  defp nccl_env(:nccl, [[first | _] | _] = hosts) do
    [ip, _port] = String.split(first, ":")
    # (a free port of this machine, found as loopback hostfiles find theirs)
    [["127.0.0.1:" <> port]] = Distributed.loopback_hostfile(1)

    fn rank ->
      [
        {"MLX_RANK", Integer.to_string(rank)},
        {"MLX_WORLD_SIZE", Integer.to_string(length(hosts))},
        {"NCCL_HOST_IP", ip},
        {"NCCL_PORT", port},
        {"CUDA_VISIBLE_DEVICES", Integer.to_string(rank)},
        {"NCCL_NVLS_ENABLE", "0"}
      ]
    end
  end

  defp nccl_env(other, _hosts),
    do: raise(ArgumentError, ":backend must be :ring or :nccl, got: #{inspect(other)}")

  defp hosts(opts) do
    case {opts[:n], opts[:hostfile]} do
      {n, nil} when is_integer(n) and n > 0 -> Distributed.loopback_hostfile(n)
      {nil, hosts} when is_list(hosts) -> hosts
      {nil, path} when is_binary(path) -> Distributed.read_hostfile(path)
      _ -> raise ArgumentError, "pass either :n (a positive integer) or :hostfile"
    end
  end

  defp charlists(env), do: Enum.map(env, fn {k, v} -> {to_charlist(k), to_charlist(v)} end)

  defp default_output(rank, line), do: IO.puts("[#{rank}] #{line}")

  # Waits for every port; `partial` holds the start of lines longer than
  # the line buffer, `done` the exit statuses.
  defp collect(ports, _partial, done, _deadline, _opts) when map_size(ports) == 0, do: done

  defp collect(ports, partial, done, deadline, opts) do
    wait = if deadline == :infinity, do: :infinity, else: max(deadline - now(), 0)

    receive do
      {port, {:data, {:noeol, text}}} when is_map_key(ports, port) ->
        collect(ports, Map.update(partial, port, text, &(&1 <> text)), done, deadline, opts)

      {port, {:data, {:eol, text}}} when is_map_key(ports, port) ->
        {start, partial} = Map.pop(partial, port, "")
        opts[:output].(ports[port], start <> text)
        collect(ports, partial, done, deadline, opts)

      {port, {:exit_status, status}} when is_map_key(ports, port) ->
        {start, partial} = Map.pop(partial, port, "")
        if start != "", do: opts[:output].(ports[port], start)
        {rank, ports} = Map.pop(ports, port)
        done = Map.put(done, rank, status)
        # after a failure, the others get the grace period
        deadline =
          if status != 0, do: min_deadline(deadline, now() + opts[:grace]), else: deadline

        collect(ports, partial, done, deadline, opts)
    after
      wait ->
        Enum.each(ports, fn {port, _} -> kill(port) end)
        Map.merge(done, Map.new(ports, fn {port, rank} -> {rank, drain(port, rank, opts)} end))
    end
  end

  defp min_deadline(:infinity, t), do: t
  defp min_deadline(d, t), do: min(d, t)

  defp now, do: System.monotonic_time(:millisecond)

  # Kills the OS process this launcher started behind `port`.
  defp kill(port) do
    case Port.info(port, :os_pid) do
      {:os_pid, pid} ->
        System.cmd("kill", ["-KILL", Integer.to_string(pid)], stderr_to_stdout: true)

      nil ->
        :ok
    end
  end

  # A killed rank's last lines, until its exit (reported as :killed).
  defp drain(port, rank, opts) do
    receive do
      {^port, {:data, {_, text}}} ->
        opts[:output].(rank, text)
        drain(port, rank, opts)

      {^port, {:exit_status, _}} ->
        :killed
    after
      5_000 -> :killed
    end
  end
end
