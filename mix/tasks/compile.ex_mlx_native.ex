defmodule Mix.Tasks.Compile.ExMlxNative do
  @shortdoc "Builds the ExMLX Rust NIF with cargo into the app's priv/native"
  @moduledoc """
  Builds `native/ex_mlx` with cargo and copies the library into `priv/native/`
  of the application's build folder (`_build/ENV/lib/ex_mlx`), where
  `:code.priv_dir(:ex_mlx)` finds it. The source tree is never written to.

  Runs as part of `mix compile` (it is listed in the project's `:compilers`).

    * provisions the MLX runtime first (see `MLX_PREFIX` in the README);
    * on Linux with an NVIDIA GPU (or `EXMLX_TARGET=cuda`), also MLX's CUDA
      runtime and NVIDIA's libraries, and points the library's run-time
      path at them (`ExMLX.Build.gpu_runtime/0`): no `LD_LIBRARY_PATH`;
    * builds in release mode; `EX_MLX_BUILD=debug` builds a debug library;
    * skips cargo entirely when no file under `native/ex_mlx` (and no build
      setting) changed since the last successful build; `mix compile --force`
      rebuilds;
    * on failure, cargo's own messages are shown and the compile stops;
    * installs a precompiled NIF instead, when one is published for this
      machine and listed in `checksum-ExMLX.Native.exs` (and
      `EXMLX_BUILD=true` is not set): downloaded, checked against its SHA-256,
      linked to the MLX runtime (see `ExMLX.Build.Precompiled` in
      `mix/ex_mlx_precompiled.ex`).
  """
  use Mix.Task.Compiler

  alias ExMLX.Build
  alias ExMLX.Build.Precompiled

  @recursive true

  @impl true
  def run(args) do
    {opts, _, _} = OptionParser.parse(args, switches: [force: :boolean])

    with {:ok, runtime} <- runtime(),
         {:ok, gpu_lib} <- gpu_runtime() do
      priv_lib = Path.join(Build.priv_native_dir(), Build.priv_lib_file())
      unlink_source_priv()

      # what makes the library, and the fingerprint of what it is made from
      {make, fingerprint} =
        case precompiled(runtime) do
          {:download, url, sha256} ->
            {&install(url, sha256, runtime, gpu_lib, priv_lib, &1),
             digest({url, sha256, runtime, gpu_lib})}

          {:build, _reason} ->
            env = Build.cargo_env(runtime)
            {&build(env, gpu_lib, priv_lib, &1), fingerprint({runtime, gpu_lib}, env)}
        end

      if !opts[:force] and File.exists?(priv_lib) and read_stamp() == fingerprint,
        do: {:noop, []},
        else: make.(fingerprint)
    end
  end

  # Precompiled NIFs exist for Linux, where the MLX runtime is a prefix the
  # library is linked to at install; the test environment's build has test
  # NIFs that no published artifact has.
  defp precompiled(runtime) do
    cond do
      not is_binary(runtime) -> {:build, "precompiled NIFs are for Linux"}
      Mix.env() == :test -> {:build, "the test environment builds its own NIF"}
      true -> Precompiled.plan(artifact(), checksums(), precompiled_url())
    end
  end

  @doc false
  def artifact,
    do: Precompiled.artifact_name(Mix.Project.config()[:version], Build.mlx_version())

  defp checksums, do: Precompiled.read_checksums(Precompiled.checksum_path(Build.root()))

  defp precompiled_url do
    case System.get_env("EXMLX_PRECOMPILED_URL") do
      url when is_binary(url) and url != "" -> url
      _ -> Mix.Project.config()[:ex_mlx][:precompiled_url]
    end
  end

  defp install(url, sha256, runtime, gpu_lib, priv_lib, fingerprint) do
    Mix.shell().info("==> ex_mlx: installing the precompiled NIF #{Path.basename(url)}")

    with :ok <- Precompiled.install(url, sha256, Build.precompiled_dir(), priv_lib),
         :ok <- Build.link_runtime(priv_lib, gpu_lib || Path.join(runtime, "lib")) do
      write_stamp(fingerprint)
    else
      {:error, message} -> failed(message)
    end
  end

  @impl true
  def clean do
    File.rm_rf(Build.priv_native_dir())
    File.rm(stamp_path())
    :ok
  end

  # Builds made before the library moved into _build had a priv/ in the source
  # tree, which Mix links as _build/ENV/lib/ex_mlx/priv. Such a link would
  # send the new library back into the source tree: replace it by a folder.
  defp unlink_source_priv do
    app_priv = Path.join(Mix.Project.app_path(), "priv")

    case File.lstat(app_priv) do
      {:ok, %File.Stat{type: :symlink}} -> File.rm!(app_priv)
      _ -> :ok
    end
  end

  defp runtime, do: Build.mlx_runtime() |> or_failed()
  defp gpu_runtime, do: Build.gpu_runtime() |> or_failed()

  defp or_failed({:ok, value}), do: {:ok, value}
  defp or_failed({:error, message}), do: failed(message)

  defp build(env, gpu_lib, priv_lib, fingerprint) do
    profile = Build.profile()
    Mix.shell().info("==> ex_mlx: building the NIF with cargo (#{profile})")
    release = if profile == :release, do: ["--release"], else: []
    args = ["build", "--package", "ex_mlx", "--lib"] ++ release ++ features()

    case Build.cargo(args, env) do
      0 ->
        built = Path.join([Build.target_dir(), Atom.to_string(profile), Build.cargo_lib_file()])
        File.mkdir_p!(Path.dirname(priv_lib))
        # Copy to a temporary name and rename, so a running VM that has the old
        # library mapped keeps a valid file.
        tmp = priv_lib <> ".tmp"
        File.cp!(built, tmp)

        # built against the CPU runtime; run against the CUDA one
        case gpu_lib && Build.link_runtime(tmp, gpu_lib) do
          {:error, message} ->
            failed(message)

          _linked_or_nil ->
            File.rename!(tmp, priv_lib)
            write_stamp(fingerprint)
        end

      status ->
        failed(
          "cargo build of native/ex_mlx failed (exit status #{status}); cargo's errors are above"
        )
    end
  end

  # The NIFs for ExMLX's own tests (native/ex_mlx/src/test_hooks.rs) exist
  # in the test environment's build only.
  defp features, do: if(Mix.env() == :test, do: ["--features", "test-hooks"], else: [])

  defp failed(message) do
    Mix.shell().error("ex_mlx: " <> message)
    {:error, [diagnostic(message)]}
  end

  defp diagnostic(message) do
    %Mix.Task.Compiler.Diagnostic{
      compiler_name: "ex_mlx_native",
      file: Path.join(Build.crate_dir(), "Cargo.toml"),
      message: message,
      position: nil,
      severity: :error
    }
  end

  # A digest of everything the build depends on: every file under the crate
  # (paths, sizes, mtimes), the cargo environment and the profile.
  defp fingerprint(runtime, env) do
    files =
      Build.crate_dir()
      |> Path.join("**")
      |> Path.wildcard(match_dot: true)
      |> Enum.reject(&String.contains?(&1, "/target/"))
      |> Enum.filter(&File.regular?/1)
      |> Enum.sort()
      |> Enum.map(fn path ->
        %File.Stat{size: size, mtime: mtime} = File.stat!(path)
        {Path.relative_to(path, Build.crate_dir()), size, mtime}
      end)

    digest({files, runtime, env, Build.profile(), features()})
  end

  defp digest(term),
    do: term |> :erlang.term_to_binary() |> :erlang.md5() |> Base.encode16(case: :lower)

  # Kept with Mix's manifests of this env's build of the app, beside the
  # library it describes (the cargo target folder is shared by every env).
  defp stamp_path, do: Path.join(Mix.Project.manifest_path(), "compile.ex_mlx_native")

  defp write_stamp(fingerprint) do
    File.mkdir_p!(Path.dirname(stamp_path()))
    File.write!(stamp_path(), fingerprint)
    {:ok, []}
  end

  defp read_stamp do
    case File.read(stamp_path()) do
      {:ok, stamp} -> stamp
      {:error, _} -> nil
    end
  end
end
