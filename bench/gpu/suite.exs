# ExMLX's ExUnit suite with :gpu as the default device, without Mix (the GPU
# machine has no Rust to rebuild the NIF with, and no network): the test
# build's ebin (test/support compiled in) on the code path, the tests
# required one by one (bench/gpu/run.sh starts it).
Application.put_env(:ex_mlx, :default_device, :gpu)
{:ok, _} = Application.ensure_all_started(:ex_mlx)

IO.puts(
  "ExMLX on #{inspect(ExMLX.default_device())}: gpu available = #{ExMLX.device_available?(:gpu)}"
)

# (Mix's build support, which some tests check, is loaded by mix.exs under Mix)
Enum.each(["mix/ex_mlx_build.ex", "mix/ex_mlx_precompiled.ex"], &Code.require_file/1)
Code.require_file("test/test_helper.exs")
# (tests tagged :mix_project run Mix in the project: nothing here can build
# it. Tests tagged :one_op_per_graph bound the memory ExMLX holds, apart from
# the queued ops' inputs MLX's CUDA backend holds: run.sh runs them in a pass
# of their own, EXMLX_SUITE_PASS=one_op_per_graph with MLX_MAX_OPS_PER_BUFFER=1)
{include, exclude} =
  case System.get_env("EXMLX_SUITE_PASS") do
    "one_op_per_graph" ->
      if System.get_env("MLX_MAX_OPS_PER_BUFFER") != "1" do
        raise "EXMLX_SUITE_PASS=one_op_per_graph needs MLX_MAX_OPS_PER_BUFFER=1"
      end

      {[:one_op_per_graph], [:test]}

    nil ->
      {[], [:one_op_per_graph]}

    other ->
      raise "EXMLX_SUITE_PASS is one_op_per_graph or unset, not #{inspect(other)}"
  end

ExUnit.configure(
  formatters: [ExUnit.CLIFormatter],
  seed: 0,
  timeout: 300_000,
  include: include,
  exclude: [:mix_project | exclude ++ ExUnit.configuration()[:exclude]]
)

# (EXMLX_SUITE_FILES, a wildcard, runs some files only: a quick check)
for file <-
      Path.wildcard(System.get_env("EXMLX_SUITE_FILES", "test/**/*_test.exs")) |> Enum.sort() do
  Code.require_file(file)
end

%{failures: failures} = ExUnit.run()
System.halt(if failures == 0, do: 0, else: 1)
