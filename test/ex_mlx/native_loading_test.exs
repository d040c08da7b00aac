defmodule ExMLX.NativeLoadingTest do
  # Where the NIF is looked for, and what happens when it is not there.
  use ExUnit.Case, async: true

  alias ExMLX.Native

  describe "nif_path/3" do
    test "EX_MLX_NIF_PATH wins, with or without the .so extension" do
      assert Native.nif_path("/opt/x/libex_mlx.so", ~c"/p", ~c"/b/ebin/m.beam") ==
               {:ok, ~c"/opt/x/libex_mlx"}

      assert Native.nif_path("/opt/x/libex_mlx", {:error, :bad_name}, :non_existing) ==
               {:ok, ~c"/opt/x/libex_mlx"}
    end

    test "an empty EX_MLX_NIF_PATH is ignored" do
      assert Native.nif_path("", ~c"/rel/lib/ex_mlx-0.1.0/priv", ~c"/x.beam") ==
               {:ok, ~c"/rel/lib/ex_mlx-0.1.0/priv/native/libex_mlx"}
    end

    test "the application's priv folder when the code server knows it" do
      assert Native.nif_path(nil, ~c"/app/_build/dev/lib/ex_mlx/priv", ~c"/x.beam") ==
               {:ok, ~c"/app/_build/dev/lib/ex_mlx/priv/native/libex_mlx"}
    end

    test "the priv folder beside ebin when :code.priv_dir/1 gives :bad_name" do
      assert Native.nif_path(
               nil,
               {:error, :bad_name},
               ~c"/tmp/bundle/ebin/Elixir.ExMLX.Native.beam"
             ) ==
               {:ok, ~c"/tmp/bundle/priv/native/libex_mlx"}
    end

    test "an error naming the problem when there is neither" do
      assert {:error, ~c"native/libex_mlx", :no_priv_dir, text} =
               Native.nif_path(nil, {:error, :bad_name}, :cover_compiled)

      assert text =~ "ex_mlx's priv folder was not found"
      assert text =~ "{:error, :bad_name}"
      assert text =~ "EX_MLX_NIF_PATH"
    end

    test "this VM loaded the library from the path nif_path/0 gives" do
      assert {:ok, path} = Native.nif_path()
      assert File.exists?(List.to_string(path) <> ".so")
      assert Native.load_error() == nil
      assert is_binary(Native.mlx_version())
    end
  end

  describe "ExMLX's code outside a folder named ex_mlx" do
    # A second VM runs ExMLX from a copy of its ebin in a folder named `bundle`:
    # :code.priv_dir(:ex_mlx) is {:error, :bad_name} there.
    @moduletag :tmp_dir

    @script """
    loaded = Code.ensure_loaded?(ExMLX.Native)
    {:ok, _} = Application.ensure_all_started(:ex_mlx)

    result =
      try do
        {:ok, ExMLX.Native.mlx_version()}
      rescue
        e in ExMLX.Error -> {:error, e.kind, e.message}
      end

    IO.puts("RESULT " <> inspect({loaded, :code.priv_dir(:ex_mlx), result}))
    """

    setup %{tmp_dir: tmp_dir} do
      ebin = Path.join([tmp_dir, "bundle", "ebin"])
      File.mkdir_p!(ebin)
      own_ebin = :code.which(ExMLX.Native) |> List.to_string() |> Path.dirname()
      File.cp_r!(own_ebin, ebin)
      %{bundle: Path.dirname(ebin), own_ebin: own_ebin}
    end

    test "without the library: the module loads, the app starts, calls name the path",
         %{bundle: bundle, own_ebin: own_ebin} do
      {loaded, priv_dir, result} = run_bundle(bundle, own_ebin, [])
      assert loaded == true
      assert priv_dir == {:error, :bad_name}
      expected = Path.join([bundle, "priv", "native", "libex_mlx.so"])
      assert {:error, :not_loaded, message} = result
      assert message =~ "the ExMLX native library was not loaded from #{expected}"
    end

    test "with the library beside ebin it loads", %{bundle: bundle, own_ebin: own_ebin} do
      {:ok, lib} = Native.nif_path()
      dest = Path.join([bundle, "priv", "native"])
      File.mkdir_p!(dest)
      File.cp!(List.to_string(lib) <> ".so", Path.join(dest, "libex_mlx.so"))

      assert {true, {:error, :bad_name}, {:ok, version}} = run_bundle(bundle, own_ebin, [])
      assert version == Native.mlx_version()
    end

    test "EX_MLX_NIF_PATH names a library that is not there",
         %{bundle: bundle, own_ebin: own_ebin, tmp_dir: tmp_dir} do
      missing = Path.join(tmp_dir, "nowhere/libex_mlx.so")

      assert {true, _, {:error, :not_loaded, message}} =
               run_bundle(bundle, own_ebin, [{"EX_MLX_NIF_PATH", missing}])

      assert message =~ "not loaded from #{missing}"
    end
  end

  # Runs @script in a fresh VM with the bundle's ebin in place of ExMLX's own
  # and every other code path of this VM's build (dependencies such as Nx):
  # the folder holding ExMLX's app folder (Mix's _build/ENV/lib, or the staged
  # GPU run's, which has no Mix project).
  defp run_bundle(bundle, own_ebin, env) do
    build = own_ebin |> Path.dirname() |> Path.dirname()

    deps =
      :code.get_path()
      |> Enum.map(&List.to_string/1)
      |> Enum.filter(&String.starts_with?(&1, build))
      |> Enum.reject(&(&1 == own_ebin))
      |> Enum.flat_map(&["-pa", &1])

    elixir = System.find_executable("elixir")
    args = deps ++ ["-pa", Path.join(bundle, "ebin"), "-e", @script]
    env = Enum.into(env, %{"EX_MLX_NIF_PATH" => nil}) |> Enum.to_list()
    {out, 0} = System.cmd(elixir, args, env: env, stderr_to_stdout: true)
    [line] = for l <- String.split(out, "\n"), String.starts_with?(l, "RESULT "), do: l
    {value, []} = Code.eval_string(String.replace_prefix(line, "RESULT ", ""))
    value
  end
end
