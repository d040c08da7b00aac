# A Bumblebee model's forward pass (32 tokens) under ExMLX.Compiler, by
# `Nx.Defn.compile/3` and by `Nx.Defn.jit/2`, called in one process and
# each call in a process of its own (as Nx.Serving runs each batch): the
# time a call, and the words each function holds (a process started with
# a function copies them all).
#
#   mix run bench/fresh_process_calls.exs MODEL_DIR [--bits 4]
#
# MODEL_DIR: a folder `Bumblebee.load_model({:local, dir})` loads (those
# bench/llm.exs makes under data/llm/). Results: bench/results/llm-cpu.md.
{opts, args} = OptionParser.parse!(System.argv(), strict: [bits: :integer])

dir =
  case args do
    [dir] -> dir
    _ -> raise ArgumentError, "usage: fresh_process_calls.exs MODEL_DIR [--bits N]"
  end

backend = {ExMLX.Backend, device: ExMLX.default_device()}
{:ok, model} = Bumblebee.load_model({:local, dir}, type: :f32, backend: backend)

model =
  if bits = opts[:bits],
    do: ExMLX.Quantization.quantize_model(model, bits: bits, group_size: 64),
    else: model

inputs = %{
  "input_ids" => Nx.iota({1, 32}, type: :s64, backend: backend),
  "attention_mask" => Nx.broadcast(Nx.tensor(1, type: :s64, backend: backend), {1, 32})
}

predict = &Axon.predict(model.model, &1, &2)
compiled = Nx.Defn.compile(predict, [model.params, inputs], compiler: ExMLX.Compiler)
jitted = Nx.Defn.jit(predict, compiler: ExMLX.Compiler)
calls = 100

IO.puts("the model's Axon graph: #{:erts_debug.flat_size(model.model)} words")

for {name, f} <- [{"Nx.Defn.compile", compiled}, {"Nx.Defn.jit", jitted}] do
  f.(model.params, inputs)
  IO.puts("#{name}: the function holds #{:erts_debug.flat_size(f)} words")

  for round <- 1..2 do
    {one, _} = :timer.tc(fn -> for _ <- 1..calls, do: f.(model.params, inputs) end)

    {fresh, _} =
      :timer.tc(fn ->
        for _ <- 1..calls, do: Task.async(fn -> f.(model.params, inputs) end) |> Task.await()
      end)

    IO.puts(
      "  round #{round}: one process #{Float.round(one / calls / 1000, 2)} ms a call, " <>
        "a process each #{Float.round(fresh / calls / 1000, 2)} ms"
    )
  end
end
