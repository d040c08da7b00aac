defmodule ExMLX.Integration.AxonDigitsTest do
  # Axon training on a real data set (scikit-learn's digits, 1,797 8×8
  # images; every fifth held out) on ExMLX with ExMLX.Compiler, and the same
  # loop — same seed, same batches — on Nx.BinaryBackend with Nx's
  # Evaluator as the reference.
  use ExUnit.Case, async: false

  alias ExMLX.Integration

  @moduletag timeout: 1_800_000

  setup_all do
    path =
      Integration.data_path("digits.safetensors")
      |> Integration.generate!("digits.py", [Integration.data_path("digits.safetensors")])

    %{digits: Integration.read_tensors(path)}
  end

  defp mlp do
    Axon.input("images", shape: {nil, 64})
    |> Axon.dense(64, activation: :relu)
    |> Axon.dense(10, activation: :softmax)
  end

  defp cnn do
    Axon.input("images", shape: {nil, 64})
    |> Axon.reshape({:batch, 8, 8, 1})
    |> Axon.conv(8, kernel_size: 3, padding: :same, activation: :relu)
    |> Axon.max_pool(kernel_size: 2)
    |> Axon.flatten()
    |> Axon.dense(10, activation: :softmax)
  end

  # Trains `model` (`epochs`, batches of `batch`) on `backend` with
  # `compiler`; the held-out accuracy and the wall time in seconds, training
  # and prediction (ExMLX's ops are lazy: the time includes their work).
  defp train(model, digits, backend, compiler, {epochs, batch}) do
    Nx.with_default_backend(backend, fn ->
      on = fn t -> Nx.backend_copy(t, backend) end
      labels = Nx.equal(Nx.new_axis(digits["train_labels"], 1), Nx.iota({1, 10}))

      batches =
        Enum.zip(
          Nx.to_batched(on.(digits["train_images"]), batch, leftover: :discard),
          Nx.to_batched(on.(labels), batch, leftover: :discard)
        )

      optimizer = Polaris.Optimizers.adam(learning_rate: 0.01)

      timed(fn ->
        params =
          model
          |> Axon.Loop.trainer(:categorical_cross_entropy, optimizer, seed: 3, log: 0)
          |> Axon.Loop.run(batches, Axon.ModelState.empty(), epochs: epochs, compiler: compiler)

        predicted =
          Axon.predict(model, params, on.(digits["test_images"]), compiler: compiler)
          |> Nx.argmax(axis: 1)

        Nx.equal(predicted, on.(digits["test_labels"])) |> Nx.mean() |> Nx.to_number()
      end)
    end)
  end

  defp timed(fun) do
    {us, result} = :timer.tc(fun)
    {result, us / 1.0e6}
  end

  # {epochs, batch size} per model
  for {name, schedule} <- [mlp: {20, 64}, cnn: {6, 32}] do
    test "#{name}: ≥ 95% held out on ExMLX, within 1 point of Nx.BinaryBackend", %{digits: digits} do
      model = model(unquote(name))
      {epochs, _} = schedule = unquote(schedule)
      {ours, our_s} = train(model, digits, ExMLX.Backend, ExMLX.Compiler, schedule)
      {theirs, their_s} = train(model, digits, Nx.BinaryBackend, Nx.Defn.Evaluator, schedule)

      IO.puts(
        "\n#{unquote(name)} (#{epochs} epochs): ExMLX #{pct(ours)} in #{fmt(our_s)} s, " <>
          "Nx.BinaryBackend #{pct(theirs)} in #{fmt(their_s)} s"
      )

      assert ours >= 0.95
      assert abs(ours - theirs) <= 0.01
    end
  end

  defp model(:mlp), do: mlp()
  defp model(:cnn), do: cnn()

  defp pct(x), do: "#{Float.round(x * 100, 1)}%"
  defp fmt(s), do: :erlang.float_to_binary(s, decimals: 1)
end
