defmodule ExMLX.Integration do
  @moduledoc """
  What the integration tests share: where their generated data lives and how
  they run this project's Python scripts (`scripts/`), with the packages
  `bin/setup` installs into `_build/python`.
  """

  @root Path.expand("../..", __DIR__)

  @doc """
  The integration project's folder: where it was compiled, or
  `EXMLX_INTEGRATION_ROOT` when set (a build run elsewhere, as
  `bench/gpu/run.sh models` runs it on a GPU machine).
  """
  @spec root() :: Path.t()
  def root do
    case System.get_env("EXMLX_INTEGRATION_ROOT") do
      root when is_binary(root) and root != "" -> root
      _ -> @root
    end
  end

  @doc "Generated data (`data/`, not committed): `path` inside it."
  @spec data_path(Path.t()) :: Path.t()
  def data_path(path), do: Path.join([root(), "data", path])

  @doc """
  Runs `scripts/<script>` with `args` unless `output` exists already; returns
  `output`. Raises with the script's output if it fails.
  """
  @spec generate!(Path.t(), String.t(), [String.t()]) :: Path.t()
  def generate!(output, script, args) do
    unless File.exists?(output) do
      File.mkdir_p!(Path.dirname(output))
      python!(script, args)
    end

    output
  end

  @doc """
  Runs `scripts/<script>` with `args`; its standard output, or raises. The
  interpreter is INTEGRATION_PYTHON if set (its PYTHONPATH: `paths`, then
  the one this process was given), else `python3` with the packages
  `bin/setup` installed (`paths` after them).
  """
  @spec python!(String.t(), [String.t()], [Path.t()]) :: String.t()
  def python!(script, args, paths \\ []) do
    {python, env} =
      case System.get_env("INTEGRATION_PYTHON") do
        python when is_binary(python) and python != "" ->
          inherited = System.get_env("PYTHONPATH", "") |> String.split(":", trim: true)

          {python,
           if(paths == [], do: [], else: [{"PYTHONPATH", Enum.join(paths ++ inherited, ":")}])}

        _ ->
          {"python3",
           [{"PYTHONPATH", Enum.join([Path.join([root(), "_build", "python"]) | paths], ":")}]}
      end

    {output, status} =
      System.cmd(python, [Path.join([root(), "scripts", script]) | args],
        env: env,
        stderr_to_stdout: true
      )

    if status != 0, do: raise("scripts/#{script} failed (exit #{status}):\n#{output}")
    output
  end

  @doc """
  Python mlx and mlx-lm for the scripts that run them, on ExMLX's own
  libmlx of `device` (`:cpu`, or `:gpu`: the CUDA one): `{:ok, paths}` to
  give `python!/3`, or `{:error, reason}` where they cannot be installed.
  Under Mix, the folders `ExMLX.Build` installs them into; without Mix (a
  staged GPU machine, where `bench/gpu/run.sh` puts the staged mlx and
  mlx-lm on PYTHONPATH), none: the inherited PYTHONPATH has them.
  """
  @spec mlx_python_paths(:cpu | :gpu) :: {:ok, [Path.t()]} | {:error, String.t()}
  def mlx_python_paths(device \\ :cpu) do
    if Process.whereis(Mix.ProjectStack) && Code.ensure_loaded?(ExMLX.Build) do
      python =
        if device == :gpu, do: &ExMLX.Build.bench_python_gpu/0, else: &ExMLX.Build.bench_python/0

      with {:ok, mlx} <- python.(),
           {:ok, mlx_lm} <- ExMLX.Build.bench_mlx_lm(),
           do: {:ok, [mlx, mlx_lm]}
    else
      {:ok, []}
    end
  end

  @doc """
  The folder of the tiny Hugging Face models and their PyTorch references
  (`scripts/tiny_models.py`), made on first use.
  """
  @spec tiny_models!() :: Path.t()
  def tiny_models! do
    dir = data_path("models")

    unless File.exists?(Path.join([dir, "vit", "reference.safetensors"])) do
      File.mkdir_p!(dir)
      python!("tiny_models.py", [dir])
    end

    dir
  end

  @doc "Named tensors of a safetensors file, as Nx tensors on `backend`."
  @spec read_tensors(Path.t(), module()) :: %{String.t() => Nx.Tensor.t()}
  def read_tensors(path, backend \\ Nx.BinaryBackend) do
    {:ok, tensors} = ExMLX.Wire.read_bundle(path, as: :nx)
    Map.new(tensors, fn {name, t} -> {name, Nx.backend_transfer(t, backend)} end)
  end

  @doc """
  The prompt of the language-model benchmark and GPU test: `n` token ids
  `(i * 7919 + 13) mod vocab`, as a `{1, n}` s64 tensor (the ids
  `scripts/llm_reference.py` gives PyTorch and mlx-lm).
  """
  @spec prompt_ids(pos_integer(), pos_integer()) :: Nx.Tensor.t()
  def prompt_ids(vocab, n),
    do: Nx.tensor([Enum.map(0..(n - 1), &rem(&1 * 7919 + 13, vocab))], type: :s64)

  if Code.ensure_loaded?(Bumblebee) do
    @doc """
    The token ids Bumblebee's greedy generation gives after `input_ids` (a
    `{1, n}` tensor, every position attended to): `model`'s
    `build_generate` with the generation config `config`, compiled with
    ExMLX.Compiler and the options `jit_opts` (`fuse: true`, say).
    """
    @spec greedy_token_ids(map(), struct(), Nx.Tensor.t(), keyword()) :: [integer()]
    def greedy_token_ids(model, config, input_ids, jit_opts \\ []) do
      config = Bumblebee.configure(config, strategy: %{type: :greedy_search})

      generate =
        model.model
        |> Bumblebee.Text.Generation.build_generate(model.spec, config)
        |> Nx.Defn.jit([compiler: ExMLX.Compiler] ++ jit_opts)

      %{token_ids: ids} =
        generate.(model.params, %{
          "input_ids" => input_ids,
          "attention_mask" => Nx.broadcast(1, input_ids.shape),
          "seed" => Nx.tensor([0])
        })

      Nx.to_flat_list(ids)
    end
  end
end
