defmodule Mix.Tasks.ExMlx.Launch do
  @shortdoc "Runs a script as the ranks of an MLX distributed group"

  @moduledoc """
  Runs an Elixir script as the ranks of a distributed group, each an OS
  process, and streams their output with rank prefixes (MLX's
  `mlx.launch`, for `ExMLX.Distributed`).

      mix ex_mlx.launch -n 4 train.exs [script args...]
      mix ex_mlx.launch --hostfile hosts.json --ranks 0,1 train.exs

  With `-n`, the ranks run on this machine over loopback (a hostfile with
  free ports on 127.0.0.1 is made). With `--hostfile` (MLX's JSON: per rank,
  a list of `"ip:port"`), the ranks named by `--ranks` (default: all) are
  started here; run the task on each machine with that machine's ranks.
  Every rank gets `MLX_RANK` and `MLX_HOSTFILE`, so
  `ExMLX.Distributed.init/1` joins the group.

  Each rank runs `mix run --no-compile script.exs` in this project and
  environment (the project is compiled once, first). With `-n`, the ranks'
  BEAM schedulers do not spin while idle (`ELIXIR_ERL_OPTIONS`, unless set):
  several ranks share the machine's cores with MLX's socket threads. When a rank fails,
  the others get `--grace` milliseconds (default 10000) to finish, then are
  killed. The task fails if any rank did.

  `--backend nccl` runs the ranks with MLX's NCCL backend instead, one GPU
  per rank on this machine (`CUDA_VISIBLE_DEVICES`; see
  `ExMLX.Distributed.Launcher`): `mix ex_mlx.launch -n 2 --backend nccl train.exs`.

  Options: `-n`/`--ranks-count`, `--hostfile`, `--ranks` (comma-separated),
  `--backend` (`ring`, the default, or `nccl`), `--grace`.
  """
  use Mix.Task

  @switches [
    ranks_count: :integer,
    hostfile: :string,
    ranks: :string,
    grace: :integer,
    backend: :string
  ]

  # With -n every rank shares this machine: the BEAM's schedulers then sleep
  # instead of spinning while idle, which would take the cores MLX's socket
  # threads need (unless ELIXIR_ERL_OPTIONS is set already).
  defp no_spin(where) do
    if where[:n] && System.get_env("ELIXIR_ERL_OPTIONS") in [nil, ""],
      do: [{"ELIXIR_ERL_OPTIONS", "+sbwt none +sbwtdcpu none +sbwtdio none"}],
      else: []
  end

  @impl true
  def run(argv) do
    {opts, rest} = OptionParser.parse_head!(argv, strict: @switches, aliases: [n: :ranks_count])

    {script, script_args} =
      case rest do
        [script | args] -> {script, args}
        [] -> Mix.raise("usage: mix ex_mlx.launch -n RANKS script.exs [args...]")
      end

    unless File.regular?(script), do: Mix.raise("no script at #{script}")

    where =
      case {opts[:ranks_count], opts[:hostfile]} do
        {n, nil} when is_integer(n) and n > 0 -> [n: n]
        {nil, path} when is_binary(path) -> [hostfile: path]
        _ -> Mix.raise("pass either -n RANKS (a positive integer) or --hostfile PATH")
      end

    ranks =
      if r = opts[:ranks] do
        r |> String.split(",", trim: true) |> Enum.map(&String.to_integer(String.trim(&1)))
      end

    backend =
      case opts[:backend] || "ring" do
        "ring" -> :ring
        "nccl" -> :nccl
        other -> Mix.raise("--backend must be ring or nccl, got: #{other}")
      end

    Mix.Task.run("compile")

    command = {"mix", ["run", "--no-compile", script | script_args]}

    statuses =
      ExMLX.Distributed.Launcher.run(command,
        n: where[:n],
        hostfile: where[:hostfile],
        ranks: ranks,
        grace: opts[:grace] || 10_000,
        backend: backend,
        env: [{"MIX_ENV", Atom.to_string(Mix.env())} | no_spin(where)]
      )

    failed = for {rank, status} <- Enum.sort(statuses), status != 0, do: {rank, status}

    if failed != [] do
      Mix.raise("ranks failed: " <> Enum.map_join(failed, ", ", fn {r, s} -> "#{r} (#{s})" end))
    end
  end
end
