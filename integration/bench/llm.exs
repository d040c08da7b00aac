# Language-model generation on ExMLX beside mlx-lm and PyTorch, in one run on
# one machine: a random-initialized Llama-shaped model made with transformers
# from a config (scripts/llm_reference.py, no hub), loaded with Bumblebee on
# ExMLX and generated greedily with Bumblebee's `build_generate` under
# ExMLX.Compiler; the same saved weights and prompt ids through mlx-lm (where
# its Python package is importable) and PyTorch's `generate` (dynamic and
# static cache). Rows: prefill of 32 and 512 tokens (ms), decode tokens/s
# ((NEW - 1) / (t(NEW) - t(1)), best of the runs), peak and steady memory,
# load time and the host memory loading takes, and how many of the greedy
# tokens agree with PyTorch's. One more decode row beside mlx-lm's model run
# with a fixed-length cache, written at a position given as an array and read
# whole under a mask (scripts/llm_reference.py's FixedCache), as a compiled
# program's decoding step has it: mlx-lm's own cache is read up to its
# offset, with no mask, which a program of fixed shapes cannot do.
#
#   mix run bench/llm.exs [--shape small|llama-1b|llama-8b|PATH/config.json]
#                         [--device cpu|gpu] [--new 128] [--quick] [--out FILE]
#                         [--fuse] [--bits 4|8] [--no-references]
#
# `--fuse` compiles with `fuse: true` (ExMLX.Compiler: on a GPU, MLX's
# compile of the runs of ops in the decoding loop). `--bits N` quantizes the
# weights for ExMLX (ExMLX.Quantization.quantize_model/2: the dense kernels
# and embeddings) and for mlx-lm (`mlx.nn.quantize`: its linear and embedding
# layers), N bits in groups of 64; PyTorch stays unquantized.
# `--no-references` runs ExMLX alone (its rows beside empty ones: to compare
# two builds of ExMLX on one machine).
# Defaults: the `small` shape (hidden 512, 8 layers) in float32 on the CPU,
# written to ../bench/results/llm-cpu.md; `--device gpu` defaults to bf16
# and ../bench/results/llm-gpu.md. `--quick` (one run each, 16 new tokens)
# writes under ../_build/bench/ instead, never the committed results.
alias ExMLX.Integration

{:ok, _} = Application.ensure_all_started([:ex_mlx, :bumblebee])

{opts, _, _} =
  OptionParser.parse(System.argv(),
    strict: [
      shape: :string,
      device: :string,
      new: :integer,
      quick: :boolean,
      out: :string,
      fuse: :boolean,
      bits: :integer,
      references: :boolean
    ]
  )

quick = Keyword.get(opts, :quick, false)
fuse = Keyword.get(opts, :fuse, false)
bits = Keyword.get(opts, :bits)
jit_options = [compiler: ExMLX.Compiler, fuse: fuse]
device = if Keyword.get(opts, :device, "cpu") == "gpu", do: :gpu, else: :cpu
shape = Keyword.get(opts, :shape, "small")
new = Keyword.get(opts, :new, if(quick, do: 16, else: 128))
prompt = 32
reps = if quick, do: 1, else: 3
{type, torch_type} = if device == :gpu, do: {:bf16, "bfloat16"}, else: {:f32, "float32"}
torch_device = if device == :gpu, do: "cuda", else: "cpu"

dir = Integration.data_path("llm/#{Path.basename(shape, ".json")}-#{torch_type}")
IO.puts("model: #{dir}")
Integration.python!("llm_reference.py", ["make", dir, shape, torch_type])

references? = Keyword.get(opts, :references, true)
if references?, do: IO.puts("PyTorch and mlx-lm (scripts/llm_reference.py)...")

# mlx-lm on Python mlx with ExMLX's own libmlx build (OpenBLAS-relinked on
# the CPU; on a GPU machine the CUDA one), where it can be installed
# (without Mix, as on a staged GPU machine, PYTHONPATH says where they are)
mlx_paths =
  case Integration.mlx_python_paths(device) do
    {:ok, paths} ->
      paths

    {:error, reason} ->
      IO.puts("mlx-lm's rows left empty: #{reason}")
      []
  end

# On a GPU, MLX builds each kernel module it compiles at run time (fused
# kernels, gathers, quantized products) with NVRTC at its first use and
# keeps it as one `.ptx` file in its disk cache, this folder (docs/gpu.md);
# nil on the CPU
ptx_dir =
  if device == :gpu,
    do:
      System.get_env("MLX_PTX_CACHE_DIR") ||
        Path.join([System.tmp_dir!(), "mlx", ExMLX.mlx_version(), "ptx"])

reference_args =
  ["run", dir, torch_device, "#{prompt}", "#{new}"] ++
    if(quick, do: ["--quick"], else: []) ++
    if(bits, do: ["--bits", "#{bits}"], else: []) ++
    if(ptx_dir, do: ["--ptx-dir", ptx_dir], else: [])

references =
  if(references?,
    do: Integration.python!("llm_reference.py", reference_args, mlx_paths),
    else: ""
  )
  |> String.split("\n", trim: true)
  |> Enum.flat_map(fn line ->
    case Jason.decode(line) do
      {:ok, %{"runtime" => runtime} = row} -> [{runtime, row}]
      _ -> []
    end
  end)
  |> Map.new()

torch = Map.get(references, "torch", %{})
mlx_lm = Map.get(references, "mlx-lm", %{})

IO.puts("ExMLX...")
backend = {ExMLX.Backend, device: device}
Nx.global_default_backend(backend)

# how many files MLX's kernel cache holds now (nil on the CPU)
ptx_modules = fn ->
  if ptx_dir, do: ptx_dir |> Path.join("**/*.ptx") |> Path.wildcard() |> length()
end

ptx_at_start = ptx_modules.()

# this VM's resident and peak resident bytes (Linux /proc)
host_memory = fn ->
  fields =
    for line <- String.split(File.read!("/proc/self/status"), "\n"),
        [key, value] <- [String.split(line, ":", parts: 2)],
        key in ["VmRSS", "VmHWM"],
        into: %{},
        do: {key, value |> String.split() |> hd() |> String.to_integer() |> Kernel.*(1024)}

  {fields["VmRSS"], fields["VmHWM"]}
end

# the host memory loading takes: its peak above the resident bytes before it
# (the peak reset through clear_refs, where the kernel allows it) and what it
# leaves resident once every tensor is on the device, in bytes; the device
# is started first (as the references start theirs), so that its own host
# memory is not counted
Nx.tensor(1, backend: backend) |> Nx.add(1) |> Nx.to_number()

host_before =
  case File.write("/proc/self/clear_refs", "5") do
    :ok -> elem(host_memory.(), 0)
    {:error, _} -> nil
  end

# (ExMLX copies tensors into the device's memory on its worker, in the
# background: loading ends when the copies have. Tied weights, which
# Bumblebee's loader reads once per parameter naming them (a tied
# embedding: the table and the output layer's kernel), are made one tensor
# by ExMLX.Params.share_equal/2, as mlx-lm's model holds one.)
{load_us, {:ok, model}} =
  :timer.tc(fn ->
    {:ok, loaded} = Bumblebee.load_model({:local, dir}, type: type, backend: backend)
    {share_us, shared} = :timer.tc(fn -> ExMLX.Params.share_equal(loaded.params) end)
    kept = fn params -> params |> Nx.Defn.Composite.flatten_list() |> Enum.uniq() |> length() end

    IO.puts(
      "ExMLX.Params.share_equal/2: #{kept.([loaded.params]) - kept.([shared])} tensors shared, " <>
        "#{Float.round(share_us / 1.0e6, 2)} s"
    )

    loaded = %{loaded | params: shared}
    :erlang.garbage_collect()
    ExMLX.Stream.synchronize(device)
    {:ok, loaded}
  end)

{load_host_peak, load_host_kept} =
  case host_before do
    nil ->
      {nil, nil}

    before ->
      :erlang.garbage_collect()
      {after_load, peak} = host_memory.()
      {peak - before, after_load - before}
  end

model =
  if bits do
    model = ExMLX.Quantization.quantize_model(model, bits: bits, group_size: 64)
    quantized = model.params

    count =
      Enum.count(quantized.data, fn {_layer, params} ->
        Enum.any?(params, fn {_name, t} -> ExMLX.Quantization.quantized?(t) end)
      end)

    IO.puts("quantized the kernels of #{count} of #{map_size(quantized.data)} layers")
    model
  else
    model
  end

# (the unquantized weights, once nothing holds them, collected and their
# release done on the worker: the steady memory after loading is the
# weights generation runs on, quantized where asked)
:erlang.garbage_collect()
ExMLX.Stream.synchronize(device)
{:ok, generation} = Bumblebee.load_generation_config({:local, dir})
steady_after_load = ExMLX.Memory.stats().active
vocab = model.spec.vocab_size
ids = &Integration.prompt_ids(vocab, &1)

median = fn fun ->
  fun.()
  times = for _ <- 1..reps, do: elem(:timer.tc(fun), 0) / 1.0e6
  times |> Enum.sort() |> Enum.at(div(reps, 2))
end

forward = Nx.Defn.jit(&Axon.predict(model.model, &1, &2), jit_options)

# the same pass returning the last position's logits alone (sliced inside
# the program, as a generation's prompt pass reads them)
forward_last = Nx.Defn.jit(&Axon.predict(model.model, &1, &2).logits[[.., -1, ..]], jit_options)

prompt_inputs = fn n ->
  %{
    "input_ids" => ids.(n),
    "attention_mask" => Nx.broadcast(Nx.tensor(1, type: :s64), {1, n})
  }
end

# a prefill's median time (s) and the mean parts of its program calls on
# the worker (ExMLX.Native.program_run_times/0): building the graph,
# queueing its kernels (MLX's async_eval), waiting for them, and the rest
# of a call's mean time, outside the worker (Nx.Defn's work at each call,
# the read of the result) (s)
profiled_prefill = fn n, pass ->
  inputs = prompt_inputs.(n)
  read = fn -> pass.(model.params, inputs) |> Nx.backend_transfer(Nx.BinaryBackend) end
  # the first call (tracing, compiling, the cache's first fill) out of the parts
  read.()

  [calls_before, building_before, queueing_before, waiting_before] =
    ExMLX.Native.program_run_times()

  {total_us, wall} = :timer.tc(fn -> median.(read) end)

  [calls_after, building_after, queueing_after, waiting_after] = ExMLX.Native.program_run_times()

  calls = max(calls_after - calls_before, 1)

  parts =
    Enum.map(
      [
        building_after - building_before,
        queueing_after - queueing_before,
        waiting_after - waiting_before
      ],
      &(&1 / calls / 1.0e9)
    )

  # (median/1 makes reps + 1 calls, each one program call)
  outside = total_us / 1.0e6 / (reps + 1) - Enum.sum(parts)
  {wall, parts ++ [outside]}
end

whole_logits = fn params, inputs -> forward.(params, inputs).logits[[.., -1, ..]] end
prefill = fn n -> elem(profiled_prefill.(n, whole_logits), 0) end

# the last prompt position's logits beside PyTorch's and mlx-lm's (files
# scripts/llm_reference.py wrote): the largest difference over the largest
# logit's magnitude
our_logits =
  forward.(model.params, %{
    "input_ids" => ids.(prompt),
    "attention_mask" => Nx.broadcast(Nx.tensor(1, type: :s64), {1, prompt})
  }).logits[[0, -1, ..]]
  |> Nx.as_type(:f32)
  |> Nx.backend_transfer(Nx.BinaryBackend)

# a runtime's logits file, as a tensor
logits_of = fn
  %{"logits" => path} when is_binary(path) -> path |> File.read!() |> Nx.from_binary(:f32)
  _ -> nil
end

relative_gap = fn
  nil, _ ->
    nil

  _, nil ->
    nil

  a, b ->
    Nx.to_number(Nx.reduce_max(Nx.abs(Nx.subtract(a, b)))) /
      Nx.to_number(Nx.reduce_max(Nx.abs(b)))
end

cache_at_prefill = ExMLX.Memory.stats().cache
{prefill_32, prefill_32_parts} = profiled_prefill.(32, whole_logits)
{prefill_512, prefill_512_parts} = profiled_prefill.(512, whole_logits)
{prefill_512_last, prefill_512_last_parts} = profiled_prefill.(512, forward_last)

# the 512-token pass again with the cache limit ExMLX set before it kept
# MLX's own (a quarter of the memory limit, at most 1 GiB:
# docs/decisions/0024-cache-limit-never-below-mlx.md)
cache_limit_in_effect = ExMLX.Memory.stats().cache_limit
lowered_cache_limit = min(div(ExMLX.Memory.stats().memory_limit, 4), 1024 ** 3)

prefill_512_lowered_cache =
  try do
    previous = ExMLX.Memory.set_cache_limit(lowered_cache_limit)
    {wall, _} = profiled_prefill.(512, whole_logits)
    ExMLX.Memory.set_cache_limit(previous)
    wall
  rescue
    e ->
      IO.puts("the cache-limit prefill row left empty: #{Exception.message(e)}")
      nil
  end

inputs = %{
  "input_ids" => ids.(prompt),
  "attention_mask" => Nx.broadcast(Nx.tensor(1, type: :s64), {1, prompt}),
  "seed" => Nx.tensor([0])
}

build = fn n ->
  config =
    Bumblebee.configure(generation, max_new_tokens: n, min_length: prompt + n, pad_token_id: 0)

  model.model
  |> Bumblebee.Text.Generation.build_generate(model.spec, config)
  |> Nx.Defn.jit(jit_options)
end

run = fn gen ->
  {us, tokens} =
    :timer.tc(fn ->
      gen.(model.params, inputs).token_ids |> Nx.backend_transfer(Nx.BinaryBackend)
    end)

  {us / 1.0e6, Nx.to_flat_list(tokens)}
end

# (the prefill rows' results, the 512-token logits among them, are garbage
# the VM has not collected yet: collected, and their release done on the
# worker, before the peak is reset, as mlx-lm's are freed by then)
:erlang.garbage_collect()
ExMLX.Stream.synchronize(device)
ExMLX.Memory.reset_peak()
generate_new = build.(new)
# the first call's parts: ExMLX.Compiler's tracing and compiling (its
# telemetry event, ExMLX.Telemetry), and the loop's steps (building them,
# MLX-compiled runs among it: MLX traces and compiles those at their first
# call); the rest is the device's work outside the loop and waiting for it
defmodule LLMBench.Compiles do
  @moduledoc false
  # the handler of ExMLX.Compiler's telemetry event: each tracing's time to
  # the process `pid` (a function of a module, as :telemetry prefers)
  def handle(_event, %{duration: d}, _metadata, pid), do: send(pid, {:compiled, d})
end

:telemetry.attach(
  "llm-bench-compiles",
  [:ex_mlx, :compiler, :compile],
  &LLMBench.Compiles.handle/4,
  self()
)

[_, first_building_before, first_waiting_before, _, _, first_compiled_before] =
  ExMLX.Native.program_loop_times()

ptx_before_first = ptx_modules.()
{first_s, tokens} = run.(generate_new)
ptx_after_first = ptx_modules.()

[_, first_building_after, first_waiting_after, _, _, first_compiled_after] =
  ExMLX.Native.program_loop_times()

:telemetry.detach("llm-bench-compiles")

collect_compiles = fn collect, total ->
  receive do
    {:compiled, d} -> collect.(collect, total + d)
  after
    0 -> System.convert_time_unit(total, :native, :microsecond) / 1.0e6
  end
end

first_compiling = collect_compiles.(collect_compiles, 0)

first_loop =
  (first_building_after - first_building_before + first_waiting_after - first_waiting_before) /
    1.0e9

first_compiled = (first_compiled_after - first_compiled_before) / 1.0e9
full = Enum.min(for _ <- 1..reps, do: elem(run.(generate_new), 0))
# where a decoding step's time goes: one more run, read from the counters
# of programs' loops (ExMLX.Native.program_loop_times/0): time building
# steps (the interpreter and MLX's graph) and waiting for the device
[steps_before, building_before, waiting_before, reads_before, queueing_before, compiled_before] =
  ExMLX.Native.program_loop_times()

{profiled_s, _} = run.(generate_new)

[steps_after, building_after, waiting_after, reads_after, queueing_after, compiled_after] =
  ExMLX.Native.program_loop_times()

steps = max(steps_after - steps_before, 1)
step_building = (building_after - building_before) / steps / 1.0e9
step_waiting = (waiting_after - waiting_before) / steps / 1.0e9
step_reads = (reads_after - reads_before) / steps
step_queueing = (queueing_after - queueing_before) / steps / 1.0e9
step_compiled = (compiled_after - compiled_before) / steps / 1.0e9
generate_one = build.(1)
run.(generate_one)
one = Enum.min(for _ <- 1..reps, do: elem(run.(generate_one), 0))
decode = (new - 1) / (full - one)
stats = ExMLX.Memory.stats()

# how many leading tokens two greedy runs share
agree = fn
  _, nil -> nil
  nil, _ -> nil
  ours, theirs -> Enum.zip(ours, theirs) |> Enum.take_while(fn {a, b} -> a == b end) |> length()
end

ms = fn
  nil -> "—"
  s -> :erlang.float_to_binary(s * 1000, decimals: 1)
end

# the modules MLX added to its disk cache between two counts
ptx_count = fn
  after_count, before_count when is_integer(after_count) -> to_string(after_count - before_count)
  _, _ -> "—"
end

num = fn
  nil -> "—"
  x when is_float(x) -> :erlang.float_to_binary(x, decimals: 1)
  x -> to_string(x)
end

gb = fn
  nil -> "—"
  bytes when is_integer(bytes) -> :erlang.float_to_binary(bytes / 1.0e9, decimals: 2)
  gigabytes -> :erlang.float_to_binary(gigabytes / 1.0, decimals: 2)
end

gap = fn
  nil -> "—"
  x -> :erlang.float_to_binary(x, [{:scientific, 1}])
end

ratio = fn
  nil, _ -> "—"
  _, nil -> "—"
  ours, theirs -> :erlang.float_to_binary(ours / theirs, decimals: 2) <> "×"
end

# mlx-lm's step, timed as ExMLX's loop is (llm_reference.py's
# mlx_lm_step_profile): building the graph and its async_eval, then waiting
mlx_lm_step = fn ->
  case mlx_lm["step_profile"] do
    %{"building_s" => building, "async_eval_s" => queueing, "waiting_s" => waiting} ->
      "#{ms.(building + queueing)} (—, #{ms.(queueing)}) / #{ms.(waiting)}"

    _ ->
      "—"
  end
end

rows = [
  "| prefill, 32 tokens (ms) | #{ms.(prefill_32)} | #{ms.(mlx_lm["prefill_32_s"])} | #{ratio.(mlx_lm["prefill_32_s"], prefill_32)} | #{ms.(torch["prefill_32_s"])} | — |",
  "| prefill, 512 tokens (ms) | #{ms.(prefill_512)} | #{ms.(mlx_lm["prefill_512_s"])} | #{ratio.(mlx_lm["prefill_512_s"], prefill_512)} | #{ms.(torch["prefill_512_s"])} | — |",
  "| prefill, 32 / 512 tokens: the worker's building / queueing (MLX's async_eval) / waiting, and the rest of a call outside the worker, a call (ms) | #{Enum.map_join(prefill_32_parts, " / ", ms)}; #{Enum.map_join(prefill_512_parts, " / ", ms)} | — | — | — | — |",
  "| prefill, 512 tokens, the last position's logits alone: time; the worker's parts, outside the worker (ms) | #{ms.(prefill_512_last)}; #{Enum.map_join(prefill_512_last_parts, " / ", ms)} | — | — | — | — |",
  "| prefill, 512 tokens, the cache limit lowered to #{gb.(lowered_cache_limit)} GB (ms); the cache limit in effect, MLX's cache before the prefill rows (GB) | #{ms.(prefill_512_lowered_cache)}; #{gb.(cache_limit_in_effect)}, #{gb.(cache_at_prefill)} | — | — | — | — |",
  "| decode, #{new} new tokens after #{prompt} (tokens/s) | #{num.(decode)} | #{num.(mlx_lm["decode"])} | #{ratio.(decode, mlx_lm["decode"])} | #{num.(torch["decode_dynamic"])} | #{num.(torch["decode_static"])} |",
  "| decode beside mlx-lm's model with a fixed-length cache read whole under a mask, as a compiled program's step is (tokens/s) | #{num.(decode)} | #{num.(mlx_lm["decode_fixed_cache"])} | #{ratio.(decode, mlx_lm["decode_fixed_cache"])} | — | — |",
  "| peak memory during generation (GB) | #{gb.(stats.peak)} | #{gb.(mlx_lm["peak_gb"])} | #{ratio.(stats.peak / 1.0e9, mlx_lm["peak_gb"])} | #{gb.(torch["peak_gb"])} | — |",
  "| steady memory after load / after generation (GB) | #{gb.(steady_after_load)} / #{gb.(stats.active)} | #{gb.(mlx_lm["active_gb"])} | — | — | — |",
  "| load (s) | #{num.(load_us / 1.0e6)} | #{num.(mlx_lm["load_s"])} | — | #{num.(torch["load_s"])} | — |",
  "| host memory while loading: peak above the start / left resident (GB) | #{gb.(load_host_peak)} / #{gb.(load_host_kept)} | #{gb.(mlx_lm["load_host_peak_gb"])} / #{gb.(mlx_lm["load_host_kept_gb"])} | — | #{gb.(torch["load_host_peak_gb"])} / #{gb.(torch["load_host_kept_gb"])} | — |",
  "| a decoding step of one more run (#{steps_after - steps_before} steps, #{ms.(profiled_s)} ms): building (of which compiled runs, MLX's async_eval) / waiting for the device (ms), device reads | #{ms.(step_building)} (#{ms.(step_compiled)}, #{ms.(step_queueing)}) / #{ms.(step_waiting)}, #{num.(step_reads)} | #{mlx_lm_step.()} | — | — | — |",
  "| first generation call: trace, compile, run (s) | #{num.(first_s)} | #{num.(mlx_lm["first_s"])} | — | — | — |",
  "| of the first call: ExMLX.Compiler's tracing and compiling / the loop's steps (of which MLX-compiled runs) (s) | #{:erlang.float_to_binary(first_compiling, decimals: 2)} / #{num.(first_loop)} (#{num.(first_compiled)}) | — | — | — | — |",
  "| kernel modules MLX built with NVRTC: in the first generation call / in ExMLX's rows before it; in its disk cache at the start (mlx-lm runs first) | #{ptx_count.(ptx_after_first, ptx_before_first)} / #{ptx_count.(ptx_before_first, ptx_at_start)}; #{num.(ptx_at_start)} | #{num.(mlx_lm["ptx_first"])} / —; #{num.(mlx_lm["ptx_at_start"])} | — | — | — |",
  "| prompt's last logits against PyTorch's: largest difference ÷ largest logit | #{gap.(relative_gap.(our_logits, logits_of.(torch)))} | #{gap.(relative_gap.(logits_of.(mlx_lm), logits_of.(torch)))} | — | — | — |",
  "| prompt's last logits against mlx-lm's: largest difference ÷ largest logit | #{gap.(relative_gap.(our_logits, logits_of.(mlx_lm)))} | — | — | — | — |",
  "| leading greedy tokens equal to PyTorch's, of #{new} | #{num.(agree.(tokens, torch["tokens"]))} | #{num.(agree.(mlx_lm["tokens"], torch["tokens"]))} | — | #{new} | — |",
  "| leading greedy tokens equal to mlx-lm's, of #{new} | #{num.(agree.(tokens, mlx_lm["tokens"]))} | — | — | — | — |"
]

where =
  case device do
    :gpu ->
      "on the GPU (ExMLX on :gpu, mlx-lm on MLX's GPU, PyTorch on CUDA)"

    :cpu ->
      "on the CPU (#{System.schedulers_online()} cores; PyTorch with #{torch["threads"]} threads)"
  end

table = """
# Language models: ExMLX + Bumblebee beside mlx-lm and PyTorch

Measured #{Calendar.strftime(DateTime.utc_now(), "%Y-%m-%d %H:%MZ")}, one run. Shape `#{shape}` (`integration/scripts/llm_reference.py`), random-initialized, #{type}, #{where};
ExMLX: Bumblebee's `build_generate` under ExMLX.Compiler#{if fuse, do: " (`fuse: true`)", else: ""}; mlx-lm #{mlx_lm["version"] || "(not importable)"};
PyTorch #{torch["version"] || "—"} `generate`. The same saved weights and prompt ids for all#{if bits, do: "; ExMLX's and mlx-lm's quantized to #{bits} bits in groups of 64 (PyTorch's not)", else: ""}. Greedy
decoding; decode tokens/s = (new − 1) ÷ (time for `new` tokens − time for 1), best of #{reps};
prefill: one forward pass, median of #{reps}. Ratio: ExMLX ÷ mlx-lm in speed (above 1: ExMLX faster),
ExMLX ÷ mlx-lm in memory.#{if quick, do: " Quick run: no claims.", else: ""}

| row | ExMLX | mlx-lm | ratio | PyTorch (dynamic cache) | PyTorch (static cache) |
|---|---:|---:|---:|---:|---:|
#{Enum.join(rows, "\n")}
"""

default_out =
  cond do
    quick -> "../../_build/bench/llm-#{device}-quick.md"
    true -> "../../bench/results/llm-#{device}.md"
  end

out = Keyword.get_lazy(opts, :out, fn -> Path.expand(default_out, __DIR__) end)
File.mkdir_p!(Path.dirname(out))
File.write!(out, table)
IO.puts(table)
IO.puts("written to #{Path.relative_to_cwd(out)}")
