defmodule ExMLX.QuantizationMLXTest do
  # quantize, dequantize and quantized_matmul give Python mlx's bits on the
  # same inputs, on the CPU (also where the default device is a GPU), for every bit width, group size and floating
  # type MLX quantizes: Python mlx of ExMLX's MLX version (installed once
  # into _build/bench-python, as bin/bench's references are) runs
  # test/support/mlx_quantization.py on the bytes this test writes.
  use ExUnit.Case, async: true

  # (:mix_project: Python mlx comes from the project's build support, which
  # installs it with pip; the staged GPU run has neither)
  @moduletag :mix_project

  @script Path.expand("../support/mlx_quantization.py", __DIR__)
  @types [{{:f, 32}, "f32"}, {{:f, 16}, "f16"}, {{:bf, 16}, "bf16"}]
  @bits [2, 3, 4, 5, 6, 8]
  @group_sizes [32, 64, 128]
  @rows 4
  @columns 256

  import ExMLX.TestHelpers, only: [pseudo_random: 3]

  defp tensor(values, type, shape) do
    floats = for v <- values, into: <<>>, do: <<v::float-32-native>>
    floats |> ExMLX.from_binary({:f, 32}, shape, device: :cpu) |> ExMLX.as_type(type)
  end

  @tag :tmp_dir
  test "the bits of Python mlx for every format", %{tmp_dir: dir} do
    assert {:ok, packages} = ExMLX.Build.bench_python()

    cases =
      for {type, name} <- @types, bits <- @bits, group_size <- @group_sizes do
        tag = "#{name}_#{bits}_#{group_size}"

        w =
          tensor(pseudo_random(@rows * @columns, 2.0, bits * group_size), type, {@rows, @columns})

        x = tensor(pseudo_random(2 * @columns, 1.0, bits + group_size), type, {2, @columns})
        File.write!(Path.join(dir, "w_#{tag}.bin"), ExMLX.to_binary(w))
        File.write!(Path.join(dir, "x_#{tag}.bin"), ExMLX.to_binary(x))

        File.write!(
          Path.join(dir, "cases.txt"),
          "#{name} #{bits} #{group_size} #{@rows} #{@columns}\n",
          [:append]
        )

        {tag, w, x, bits, group_size}
      end

    test_python = Path.expand("_build/test-python")
    path = Enum.join([packages, test_python | List.wrap(System.get_env("PYTHONPATH"))], ":")

    {out, status} =
      System.cmd("python3", [@script, dir], stderr_to_stdout: true, env: [{"PYTHONPATH", path}])

    assert status == 0, out
    assert out =~ "ok #{ExMLX.Build.mlx_version()}"

    for {tag, w, x, bits, group_size} <- cases do
      opts = [group_size: group_size, bits: bits]
      {packed, scales, biases} = ExMLX.quantize(w, opts)

      ours = %{
        "packed" => packed,
        "scales" => scales,
        "biases" => biases,
        "dequantized" => ExMLX.dequantize(packed, scales, biases, opts),
        "product" => ExMLX.quantized_matmul(x, packed, scales, biases, opts)
      }

      for {name, t} <- ours do
        theirs = File.read!(Path.join(dir, "#{name}_#{tag}.bin"))
        assert ExMLX.to_binary(t) == theirs, "#{name} differs from Python mlx's for #{tag}"
      end
    end
  end
end
