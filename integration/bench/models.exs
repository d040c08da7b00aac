# Bumblebee models on ExMLX (ExMLX.Compiler) beside PyTorch on the same
# machine in the same run, and Nx.BinaryBackend (Nx's Evaluator) for scale:
# the forward pass of GPT-2 and BERT (hidden 256, 4 layers, vocabulary 2,048;
# a batch of 1 × 128 tokens) and GPT-2's greedy generation of 32 tokens
# after a 16-token prompt (tokens/s). Writes ../bench/results/models.md;
# with `--quick` (small repetitions, no claims), ../_build/bench/models-quick.md
# instead, so that a quick run never replaces the committed table.
#
#   mix run bench/models.exs [--quick] [--device gpu] [--out FILE]
#
# `--device gpu`: ExMLX on :gpu and PyTorch on CUDA, without the
# BinaryBackend run (bench/gpu/run.sh models runs it so, from a bundle, with
# no Mix: this script uses none); `--out`: where the table goes.
alias ExMLX.Integration

# (started here as well as by Mix: bench/gpu/run.sh runs this script without it)
{:ok, _} = Application.ensure_all_started([:ex_mlx, :bumblebee])

{opts, _, _} =
  OptionParser.parse(System.argv(), strict: [quick: :boolean, device: :string, out: :string])

quick = Keyword.get(opts, :quick, false)
gpu? = Keyword.get(opts, :device, "cpu") == "gpu"
reps = if quick, do: 3, else: 15
dir = Integration.data_path("bench_models")
File.mkdir_p!(dir)
mlx = if gpu?, do: {ExMLX.Backend, device: :gpu}, else: ExMLX.Backend

IO.puts("PyTorch (scripts/bench_models.py)...")

torch_args =
  [dir] ++ if(quick, do: ["--quick"], else: []) ++ if(gpu?, do: ["--device", "cuda"], else: [])

torch = Integration.python!("bench_models.py", torch_args)
torch = torch |> String.split("\n", trim: true) |> List.last() |> Jason.decode!()

# (a first, untimed run compiles the program; Nx's Evaluator has nothing to
# compile, and one BinaryBackend forward pass takes minutes: no warm-up there)
median = fn fun, reps, warm_up? ->
  if warm_up?, do: fun.()

  samples =
    for _ <- 1..reps do
      {us, _} = :timer.tc(fun)
      us / 1.0e6
    end

  samples |> Enum.sort() |> Enum.at(div(reps, 2))
end

ids = Nx.iota({1, 128}, type: :s64) |> Nx.multiply(7) |> Nx.remainder(2048)
inputs = %{"input_ids" => ids, "attention_mask" => Nx.broadcast(1, {1, 128})}

forward = fn name, backend, compiler, reps ->
  Nx.with_default_backend(backend, fn ->
    {:ok, model} = Bumblebee.load_model({:local, Path.join(dir, name)}, backend: backend)
    inputs = Map.new(inputs, fn {k, v} -> {k, Nx.backend_copy(v, backend)} end)
    run = Nx.Defn.jit(&Axon.predict(model.model, &1, &2), compiler: compiler)

    median.(
      fn -> run.(model.params, inputs).logits |> Nx.backend_transfer(Nx.BinaryBackend) end,
      reps,
      compiler != Nx.Defn.Evaluator
    )
  end)
end

generate = fn backend, compiler, reps ->
  Nx.with_default_backend(backend, fn ->
    path = {:local, Path.join(dir, "gpt2")}
    {:ok, model} = Bumblebee.load_model(path, backend: backend)
    {:ok, config} = Bumblebee.load_generation_config(path)
    config = Bumblebee.configure(config, max_new_tokens: 32, min_length: 16 + 32)

    run =
      model.model
      |> Bumblebee.Text.Generation.build_generate(model.spec, config)
      |> Nx.Defn.jit(compiler: compiler)

    prompt = %{
      "input_ids" => Nx.backend_copy(ids[[.., 0..15]], backend),
      "attention_mask" => Nx.broadcast(1, {1, 16}),
      "seed" => Nx.tensor([0])
    }

    median.(fn -> run.(model.params, prompt).token_ids |> Nx.to_flat_list() end, reps, true)
  end)
end

IO.puts("ExMLX...")

ours = %{
  gpt2: forward.("gpt2", mlx, ExMLX.Compiler, reps),
  bert: forward.("bert", mlx, ExMLX.Compiler, reps),
  generate: generate.(mlx, ExMLX.Compiler, max(1, div(reps, 3)))
}

# (about 3 minutes a forward pass on 2 cores: GPT-2's only, one run, and
# not in a quick run nor beside a GPU)
binary =
  if quick or gpu? do
    %{}
  else
    IO.puts("Nx.BinaryBackend (GPT-2's forward pass)...")
    %{gpt2: forward.("gpt2", Nx.BinaryBackend, Nx.Defn.Evaluator, 1)}
  end

ms = fn
  nil -> "—"
  s -> :erlang.float_to_binary(s * 1000, decimals: 1)
end

ratio = &:erlang.float_to_binary(&1 / &2, decimals: 2)
rate = &:erlang.float_to_binary(32 / &1, decimals: 1)

rows = [
  "| GPT-2 forward, 1 × 128 tokens (ms) | #{ms.(ours.gpt2)} | #{ms.(torch["gpt2_forward_s"])} | #{ratio.(ours.gpt2, torch["gpt2_forward_s"])} | #{ms.(binary[:gpt2])} |",
  "| BERT forward, 1 × 128 tokens (ms) | #{ms.(ours.bert)} | #{ms.(torch["bert_forward_s"])} | #{ratio.(ours.bert, torch["bert_forward_s"])} | — |",
  "| GPT-2 greedy generation, 32 tokens (tokens/s) | #{rate.(ours.generate)} | #{rate.(torch["gpt2_generate_s"])} | #{ratio.(ours.generate, torch["gpt2_generate_s"])} | — |"
]

where = if gpu?, do: "on #{torch["gpu"]} (ExMLX on :gpu, PyTorch on CUDA)", else: "on the CPU"
torch_setting = if gpu?, do: "", else: " with #{torch["threads"]} threads"

binary_note =
  if gpu?,
    do: "",
    else: "\nNx.BinaryBackend with Nx's Evaluator, one run of GPT-2's forward pass, for scale."

table =
  """
  # Bumblebee models: ExMLX beside PyTorch

  GPT-2 and BERT, random-initialized, hidden size 256, 4 layers, 4 heads, vocabulary 2,048
  (integration/scripts/bench_models.py), loaded with Bumblebee; medians of #{reps} runs
  (generation: #{max(1, div(reps, 3))}) #{where}. ExMLX runs them with ExMLX.Compiler; PyTorch
  #{torch["torch"]}#{torch_setting}, eval mode, no gradients (its generation uses
  transformers' key/value cache, as Bumblebee's does).#{binary_note} Ratio: ExMLX time / PyTorch
  time, tokens/s included (below 1: ExMLX is faster).#{if quick, do: " Quick run: no speed claims.", else: ""}

  | row | ExMLX | PyTorch | ratio | Nx.BinaryBackend |
  |---|---:|---:|---:|---:|
  #{Enum.join(rows, "\n")}
  """

default_out =
  if quick,
    do: "../../_build/bench/models-quick.md",
    else: "../../bench/results/models.md"

out = Keyword.get_lazy(opts, :out, fn -> Path.expand(default_out, __DIR__) end)

File.mkdir_p!(Path.dirname(out))
File.write!(out, table)
IO.puts(table)
IO.puts("written to #{Path.relative_to_cwd(out)}")
