# A quantized model folder in mlx-community's layout, loaded by
# ExMLX.Quantization.load_model/2 on the GPU and on the CPU, compared layer
# by layer: each quantized parameter's dequantized values, its product with
# one row and with 8 rows (MLX's matrix-vector and matrix-matrix kernels),
# then the model's hidden states and logits (bench/gpu/README.md). Run
# after the staged suite's `mlx_community` file has made its folders:
#
#   bench/gpu/run.sh elixir bench/gpu/quantized_layers_probe.exs integration/data/mlx-community/phi3
#
# PROBE_DEVICE=cpu compares the CPU with itself (the script's own check:
# every gap 0). Prints one line per case: `ok` or `DIFF`, the largest
# difference over the largest value of the CPU's result, the case.
{:ok, _} = Application.ensure_all_started([:ex_mlx, :bumblebee])

alias ExMLX.Quantization

folder =
  case System.argv() do
    [folder] -> folder
    _ -> raise ArgumentError, "usage: quantized_layers_probe.exs FOLDER"
  end

device = String.to_existing_atom(System.get_env("PROBE_DEVICE", "gpu"))
on_cpu = &Nx.backend_transfer(&1, {ExMLX.Backend, device: :cpu})

load = fn device ->
  {:ok, model} = Quantization.load_model({:local, folder}, device: device)
  model
end

{reference, probed} = {load.(:cpu), load.(device)}

report = fn name, got, expected ->
  got = on_cpu.(got)
  difference = got |> Nx.subtract(expected) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
  largest = expected |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
  gap = difference / max(largest, 1.0)
  status = if gap <= 1.0e-5, do: "ok  ", else: "DIFF"
  IO.puts("#{status} #{:io_lib.format(~c"~.2e", [gap])} #{name}")
end

IO.puts("#{folder}: #{device} against cpu")

for {layer, params} <- Enum.sort(reference.params.data),
    {name, %Nx.Tensor{} = t} <- Enum.sort(params),
    Quantization.quantized?(t) do
  other = probed.params.data[layer][name]
  label = "#{layer}.#{name} #{inspect(t.shape)} (#{Quantization.describe(t)})"
  report.("dequantize #{label}", Quantization.dequantize(other), Quantization.dequantize(t))
  {rows, _} = t.shape

  for m <- [1, 8] do
    {x, _} = Nx.Random.normal(Nx.Random.key(m), shape: {m, rows}, type: t.type)
    x = on_cpu.(x)
    expected = Nx.dot(x, Quantization.dequantize(t))

    got =
      try do
        Nx.dot(Nx.backend_transfer(x, {ExMLX.Backend, device: device}), other)
      rescue
        e -> e
      end

    case got do
      %Nx.Tensor{} -> report.("dot of {#{m}, #{rows}} with #{label}", got, expected)
      e -> IO.puts("ERROR dot of {#{m}, #{rows}} with #{label}: #{Exception.message(e)}")
    end
  end
end

inputs = fn device ->
  %{
    "input_ids" =>
      Nx.tensor([[1, 5, 9, 13, 17, 21, 25, 29]], backend: {ExMLX.Backend, device: device})
  }
end

predict = fn model, device ->
  Axon.predict(model.model, model.params, inputs.(device),
    global_layer_options: [output_hidden_states: true]
  )
end

expected = predict.(reference, :cpu)
got = predict.(probed, device)

for {state, i} <- Enum.with_index(Tuple.to_list(expected.hidden_states)) do
  report.("hidden state #{i}", elem(got.hidden_states, i), state)
end

report.("logits", got.logits, expected.logits)
